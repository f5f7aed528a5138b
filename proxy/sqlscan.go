package proxy

// This file holds a small SQL tokenizer. The proxy never uses it to decide
// whether SQL writes (PostgreSQL decides that: see DESIGN.md); it only finds
// statement boundaries and the fence call, and spots statements that would
// switch a session or transaction to read-write behind the proxy's back.

type tokKind uint8

const (
	tkEOF tokKind = iota
	tkIdent
	tkQIdent
	tkString
	tkParam
	tkSemi
	tkLParen
	tkRParen
	tkComma
	tkDot
	tkOther
)

type token struct {
	kind       tokKind
	start, end int // byte range in the source, quotes included
}

type lexer struct {
	src []byte
	pos int
	// bad is set when the text ends inside a quote or comment; PostgreSQL
	// rejects such a text, so nothing in it runs.
	bad bool
}

func isIdentStart(c byte) bool {
	return c == '_' || (c|0x20) >= 'a' && (c|0x20) <= 'z' || c >= 0x80
}

func isIdentChar(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}

func (l *lexer) next() token {
	src := l.src
	for l.pos < len(src) {
		c := src[l.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.pos++
		case c == '-' && l.pos+1 < len(src) && src[l.pos+1] == '-':
			for l.pos < len(src) && src[l.pos] != '\n' {
				l.pos++
			}
		case c == '/' && l.pos+1 < len(src) && src[l.pos+1] == '*':
			depth := 0
			for l.pos < len(src) {
				if src[l.pos] == '/' && l.pos+1 < len(src) && src[l.pos+1] == '*' {
					depth++
					l.pos += 2
				} else if src[l.pos] == '*' && l.pos+1 < len(src) && src[l.pos+1] == '/' {
					depth--
					l.pos += 2
					if depth == 0 {
						break
					}
				} else {
					l.pos++
				}
			}
			if depth != 0 {
				l.bad = true
			}
		default:
			return l.token()
		}
	}
	return token{kind: tkEOF, start: len(src), end: len(src)}
}

func (l *lexer) token() token {
	src := l.src
	start := l.pos
	c := src[start]
	switch {
	case c == '\'':
		l.quoted('\'', false)
		return token{tkString, start, l.pos}
	case (c == 'e' || c == 'E') && start+1 < len(src) && src[start+1] == '\'':
		l.pos++
		l.quoted('\'', true)
		return token{tkString, start, l.pos}
	case (c == 'b' || c == 'B' || c == 'x' || c == 'X' || c == 'n' || c == 'N') && start+1 < len(src) && src[start+1] == '\'':
		l.pos++
		l.quoted('\'', false)
		return token{tkString, start, l.pos}
	case (c == 'u' || c == 'U') && start+2 < len(src) && src[start+1] == '&' && (src[start+2] == '\'' || src[start+2] == '"'):
		q := src[start+2]
		l.pos += 2
		l.quoted(q, false)
		if q == '"' {
			return token{tkQIdent, start, l.pos}
		}
		return token{tkString, start, l.pos}
	case c == '"':
		l.quoted('"', false)
		return token{tkQIdent, start, l.pos}
	case c == '$':
		if start+1 < len(src) && src[start+1] >= '0' && src[start+1] <= '9' {
			l.pos++
			for l.pos < len(src) && src[l.pos] >= '0' && src[l.pos] <= '9' {
				l.pos++
			}
			return token{tkParam, start, l.pos}
		}
		if l.dollarQuote() {
			return token{tkString, start, l.pos}
		}
		l.pos++
		return token{tkOther, start, l.pos}
	case isIdentStart(c):
		for l.pos < len(src) && isIdentChar(src[l.pos]) {
			l.pos++
		}
		return token{tkIdent, start, l.pos}
	}
	l.pos++
	switch c {
	case ';':
		return token{tkSemi, start, l.pos}
	case '(':
		return token{tkLParen, start, l.pos}
	case ')':
		return token{tkRParen, start, l.pos}
	case ',':
		return token{tkComma, start, l.pos}
	case '.':
		return token{tkDot, start, l.pos}
	}
	return token{tkOther, start, l.pos}
}

// quoted consumes a quoted run starting at l.pos (the opening quote).
// Doubled quotes stay inside; backslash escapes count when escapes is set.
func (l *lexer) quoted(q byte, escapes bool) {
	src := l.src
	l.pos++
	for l.pos < len(src) {
		c := src[l.pos]
		if escapes && c == '\\' {
			l.pos += 2
			continue
		}
		l.pos++
		if c == q {
			if l.pos < len(src) && src[l.pos] == q {
				l.pos++
				continue
			}
			return
		}
	}
	l.pos = len(src)
	l.bad = true
}

// dollarQuote consumes $tag$...$tag$ at l.pos and reports whether it was one.
func (l *lexer) dollarQuote() bool {
	src := l.src
	i := l.pos + 1
	for i < len(src) && src[i] != '$' {
		if !isIdentChar(src[i]) || src[i] == '$' || (i == l.pos+1 && src[i] >= '0' && src[i] <= '9') {
			return false
		}
		i++
	}
	if i >= len(src) {
		return false
	}
	tag := src[l.pos : i+1]
	j := i + 1
	for j+len(tag) <= len(src) {
		if src[j] == '$' && string(src[j:j+len(tag)]) == string(tag) {
			l.pos = j + len(tag)
			return true
		}
		j++
	}
	l.pos = len(src)
	l.bad = true
	return true
}

// stmtInfo describes one non-empty statement of a query text.
type stmtInfo struct {
	start, end int // byte range, without the terminating semicolon
	fence      bool
	readWrite  bool // would switch to read-write (see isReadWriteSwitch)
	atomic     bool // contains BEGIN ATOMIC, whose body has semicolons
	// showRO: the statement is exactly SHOW transaction_read_only, the
	// question clients ask to find a read-write server.
	showRO bool
}

// scanStatements splits src into statements the way PostgreSQL's parser
// does (empty statements dropped) and classifies each. It appends to dst.
func scanStatements(dst []stmtInfo, src []byte) ([]stmtInfo, bool) {
	l := lexer{src: src}
	var toks [32]token
	n := 0
	cur := stmtInfo{start: -1}
	var c classifier
	for {
		t := l.next()
		if t.kind == tkSemi || t.kind == tkEOF {
			if cur.start >= 0 {
				cur.fence = c.fence(src, toks[:min(n, len(toks))], n)
				cur.showRO = n == 2 && identIs(src, toks[0], "show") && identIs(src, toks[1], "transaction_read_only")
				cur.readWrite = c.readWrite
				cur.atomic = c.atomic
				dst = append(dst, cur)
			}
			if t.kind == tkEOF {
				return dst, !l.bad
			}
			cur = stmtInfo{start: -1}
			n = 0
			c = classifier{}
			continue
		}
		if cur.start < 0 {
			cur.start = t.start
		}
		cur.end = t.end
		if n < len(toks) {
			toks[n] = t
		}
		c.observe(src, t, n, toks[:min(n, len(toks))])
		n++
	}
}

// classifier accumulates facts about one statement's tokens.
type classifier struct {
	first      string // lower-cased first keyword: "set", "begin", ...
	readWrite  bool
	atomic     bool
	prevRead   bool
	prevBegin  bool
	setConfig  bool
	namesGUC   bool // mentions default_transaction_read_only or transaction_read_only
	sessionChr bool
}

func lowerEq(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if b[i]|0x20 != s[i] && b[i] != s[i] {
			return false
		}
	}
	return true
}

// identIs reports whether t is the identifier name (unquoted any case, or
// quoted exactly). name is lower case.
func identIs(src []byte, t token, name string) bool {
	switch t.kind {
	case tkIdent:
		return lowerEq(src[t.start:t.end], name)
	case tkQIdent:
		return t.end-t.start == len(name)+2 && string(src[t.start+1:t.end-1]) == name
	}
	return false
}

func (c *classifier) observe(src []byte, t token, i int, prev []token) {
	if i == 0 && t.kind == tkIdent {
		for _, kw := range [...]string{"set", "reset", "begin", "start", "alter", "select"} {
			if lowerEq(src[t.start:t.end], kw) {
				c.first = kw
			}
		}
	}
	isGUCName := func() bool {
		for _, g := range [...]string{"default_transaction_read_only", "transaction_read_only"} {
			if identIs(src, t, g) {
				return true
			}
			if t.kind == tkString && t.end-t.start == len(g)+2 && src[t.start] == '\'' && lowerEq(src[t.start+1:t.end-1], g) {
				return true
			}
		}
		return false
	}
	switch {
	case identIs(src, t, "write") && c.prevRead:
		if c.first == "set" || c.first == "begin" || c.first == "start" || c.first == "alter" {
			c.readWrite = true
		}
	case identIs(src, t, "atomic") && c.prevBegin:
		c.atomic = true
	case identIs(src, t, "set_config"):
		c.setConfig = true
	case identIs(src, t, "characteristics"):
		c.sessionChr = true
	case isGUCName():
		c.namesGUC = true
	}
	if c.namesGUC && (c.first == "set" || c.first == "reset" || c.first == "alter" || c.setConfig) {
		c.readWrite = true
	}
	if c.sessionChr && c.first == "set" {
		c.readWrite = true
	}
	c.prevRead = identIs(src, t, "read")
	c.prevBegin = identIs(src, t, "begin")
}

// fence reports whether the statement is exactly
// SELECT fencegate.fence(<arg>, <arg>) with balanced parentheses.
func (c *classifier) fence(src []byte, toks []token, n int) bool {
	if n < 8 || n > len(toks) {
		return false
	}
	if !identIs(src, toks[0], "select") || !identIs(src, toks[1], "fencegate") || toks[2].kind != tkDot ||
		!identIs(src, toks[3], "fence") || toks[4].kind != tkLParen {
		return false
	}
	depth, commas := 0, 0
	for i := 4; i < n; i++ {
		switch toks[i].kind {
		case tkLParen:
			depth++
		case tkRParen:
			depth--
			if depth == 0 && i != n-1 {
				return false
			}
		case tkComma:
			if depth == 1 {
				commas++
			}
		case tkSemi:
			return false
		}
	}
	return depth == 0 && commas == 1 && toks[n-1].kind == tkRParen
}
