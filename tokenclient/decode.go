package tokenclient

import (
	"encoding/json"
	"math"

	"github.com/fencegate/fencegate/tokenapi"
)

// decodeAnswer decodes a 200 answer into out. The token answers are first
// read by a parser of exactly the form the service writes (its field
// order, no spaces, strings without escapes, decimal integers in range);
// anything else, valid JSON in another form included, goes to
// encoding/json. Whatever the parser accepts, encoding/json decodes to the
// same value (TestDecodeAnswer holds it to that); it only skips the
// reflection, a share of the client's CPU per token.
func decodeAnswer(data []byte, out any) error {
	switch v := out.(type) {
	case *tokenapi.TokenResponse:
		if parseTokenResponse(data, v) {
			return nil
		}
		*v = tokenapi.TokenResponse{}
	case *tokenapi.BatchResponse:
		if parseBatchResponse(data, v) {
			return nil
		}
		*v = tokenapi.BatchResponse{}
	}
	return json.Unmarshal(data, out)
}

// answerParser reads one answer left to right; ok turns false at the
// first byte it does not expect, and stays false.
type answerParser struct {
	b  []byte
	ok bool
}

// lit consumes s.
func (p *answerParser) lit(s string) {
	if !p.ok || len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		p.ok = false
		return
	}
	p.b = p.b[len(s):]
}

// peek reports whether the rest starts with s.
func (p *answerParser) peek(s string) bool {
	return p.ok && len(p.b) >= len(s) && string(p.b[:len(s)]) == s
}

// str consumes a string of printable ASCII without '"' or '\\'.
func (p *answerParser) str() string {
	if !p.ok || len(p.b) < 2 || p.b[0] != '"' {
		p.ok = false
		return ""
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			s := string(p.b[1:i])
			p.b = p.b[i+1:]
			return s
		case c < 0x20 || c > 0x7e || c == '\\':
			p.ok = false
			return ""
		}
	}
	p.ok = false
	return ""
}

// uint consumes a JSON integer without sign that fits max.
func (p *answerParser) uint(max uint64) uint64 {
	if !p.ok || len(p.b) == 0 || p.b[0] < '0' || p.b[0] > '9' {
		p.ok = false
		return 0
	}
	if p.b[0] == '0' {
		p.b = p.b[1:]
		if len(p.b) > 0 && (p.b[0] >= '0' && p.b[0] <= '9') {
			p.ok = false // a leading zero is not JSON
		}
		return 0
	}
	var n uint64
	i := 0
	for ; i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9'; i++ {
		d := uint64(p.b[i] - '0')
		if n > (max-d)/10 {
			p.ok = false
			return 0
		}
		n = n*10 + d
	}
	p.b = p.b[i:]
	return n
}

// int consumes a JSON integer that fits an int64.
func (p *answerParser) int() int64 {
	if p.peek("-") {
		p.b = p.b[1:]
		return -int64(p.uint(-math.MinInt64)) // -(1<<63) converts back to itself
	}
	return int64(p.uint(math.MaxInt64))
}

// end accepts what ends a JSON answer: nothing, or white space and nothing
// else after the value. A fraction or exponent after a number is refused
// here or at the next literal.
func (p *answerParser) end() bool {
	if !p.ok {
		return false
	}
	for _, c := range p.b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

func parseTokenResponse(data []byte, r *tokenapi.TokenResponse) bool {
	p := answerParser{b: data, ok: true}
	p.lit(`{"resource":`)
	r.Resource = p.str()
	p.lit(`,"token":`)
	r.Token = p.int()
	if p.peek(`,"proof":`) {
		p.lit(`,"proof":`)
		r.Proof = p.str()
	}
	p.lit(`,"term":`)
	r.Term = p.uint(math.MaxUint64)
	p.lit(`,"index":`)
	r.Index = p.uint(math.MaxUint64)
	p.lit(`,"leader":`)
	r.Leader = p.str()
	p.lit(`}`)
	return p.end()
}

func parseBatchResponse(data []byte, r *tokenapi.BatchResponse) bool {
	p := answerParser{b: data, ok: true}
	p.lit(`{"tokens":[`)
	for p.ok {
		var t tokenapi.BatchToken
		p.lit(`{"resource":`)
		t.Resource = p.str()
		p.lit(`,"token":`)
		t.Token = p.int()
		if p.peek(`,"proof":`) {
			p.lit(`,"proof":`)
			t.Proof = p.str()
		}
		p.lit(`}`)
		if !p.ok {
			break
		}
		r.Tokens = append(r.Tokens, t)
		if !p.peek(`,`) {
			break
		}
		p.lit(`,`)
	}
	p.lit(`],"term":`)
	r.Term = p.uint(math.MaxUint64)
	p.lit(`,"index":`)
	r.Index = p.uint(math.MaxUint64)
	p.lit(`,"leader":`)
	r.Leader = p.str()
	p.lit(`}`)
	return p.end()
}
