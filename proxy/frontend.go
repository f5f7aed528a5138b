package proxy

import (
	"encoding/binary"
	"fmt"
	"time"
)

// frontState is the frontend pump's own state.
type frontState struct {
	batch      uint64 // batches forwarded so far
	units      int    // response units forwarded in the current batch
	inBatch    bool
	startStat  byte // transaction status when the current batch began, 0 when unknown
	fenceExecs int
	otherExecs int
	// fenceStmts and fencePortals name the prepared statements whose text
	// is a fence call, and the portals bound to them.
	fenceStmts   map[string]struct{}
	fencePortals map[string]struct{}
	rwPending    bool // a read-write switch was sent and no Execute since
	stmts        []stmtInfo
	out          []byte
}

func (f *frontState) init() {
	f.fenceStmts = map[string]struct{}{}
	f.fencePortals = map[string]struct{}{}
}

// frontendPump forwards client messages upstream until the client leaves
// (nil error on Terminate) or breaks the protocol.
func (s *session) frontendPump() error {
	f := &s.front
	for {
		if s.cf.r.Buffered() == 0 {
			if err := s.uw.Flush(); err != nil {
				return err
			}
		}
		typ, n, err := s.cf.peekHeader()
		if err != nil {
			return err
		}
		if !f.inBatch {
			f.inBatch = true
			// The transaction status is known only once every batch sent
			// before this one has been answered; a client that pipelines
			// (BEGIN, then the fence, before BEGIN's answer) starts a batch
			// in a status nobody knows yet, 0 here. The proxy then makes no
			// "fence alone" check: such a fence runs, advances its mark and
			// protects nothing, which breaks no fence.
			f.startStat = 0
			if s.sent.Load() == s.answered.Load() {
				f.startStat = byte(s.status.Load())
			}
			f.fenceExecs, f.otherExecs = 0, 0
		}
		switch typ {
		case 'Q':
			body, err := s.cf.body(n)
			if err != nil {
				return err
			}
			if err := s.frontQuery(body); err != nil {
				return err
			}
			s.endBatch()
		case 'P':
			body, err := s.cf.body(n)
			if err != nil {
				return err
			}
			if err := s.frontParse(body); err != nil {
				return err
			}
			f.units++
		case 'B':
			if len(f.fenceStmts) == 0 && len(f.fencePortals) == 0 {
				err = s.cf.copyTo(s.uw, n)
			} else {
				err = s.frontBind(n)
			}
			if err != nil {
				return err
			}
			f.units++
		case 'E':
			if err := s.frontExecute(n); err != nil {
				return err
			}
		case 'C':
			body, err := s.cf.body(n)
			if err != nil {
				return err
			}
			if len(body) < 2 || (body[0] != 'S' && body[0] != 'P') {
				return fmt.Errorf("%w: malformed Close message", errProtocol)
			}
			if name, _, ok := cstring(body[1:]); ok {
				if body[0] == 'S' {
					delete(f.fenceStmts, string(name))
				} else {
					delete(f.fencePortals, string(name))
				}
			}
			if err := writeMsg(s.uw, typ, body); err != nil {
				return err
			}
			f.units++
		case 'D':
			if err := s.cf.copyTo(s.uw, n); err != nil {
				return err
			}
			f.units++
		case 'S':
			if f.startStat == 'I' && f.fenceExecs > 0 && f.otherExecs == 0 {
				// The batch's implicit transaction holds only the fence.
				s.injections.add(injection{batch: f.batch, at: f.units, n: injectUnits, kind: injAlone})
				if _, err := s.uw.Write(injectAlone); err != nil {
					return err
				}
				f.units += injectUnits
			}
			if err := s.cf.copyTo(s.uw, n); err != nil {
				return err
			}
			s.endBatch()
			f.rwPending = false
		case 'F':
			if err := s.cf.copyTo(s.uw, n); err != nil {
				return err
			}
			s.endBatch()
		case 'H', 'd', 'c', 'f':
			if err := s.cf.copyTo(s.uw, n); err != nil {
				return err
			}
		case 'X':
			_ = s.cf.copyTo(s.uw, n)
			_ = s.uw.Flush()
			return nil
		default:
			return fmt.Errorf("%w: unexpected frontend message type %q", errProtocol, typ)
		}
	}
}

func (s *session) endBatch() {
	f := &s.front
	f.batch++
	f.units = 0
	f.inBatch = false
	s.sent.Add(1)
}

// mayMatter is a quick filter: only texts containing one of these words can
// hold a fence call or a switch to read-write, and only those are scanned.
func (s *session) mayMatter(q []byte) bool {
	if containsFold(q, "fencegate") {
		return true
	}
	return s.required && (containsFold(q, "write") || containsFold(q, "read_only") || containsFold(q, "characteristics"))
}

// frontQuery forwards a simple Query, rewriting it when it holds a fence.
func (s *session) frontQuery(body []byte) error {
	f := &s.front
	// A simple Query drops the unnamed statement and portal.
	delete(f.fenceStmts, "")
	delete(f.fencePortals, "")
	if len(body) == 0 || body[len(body)-1] != 0 {
		return fmt.Errorf("%w: Query message not NUL-terminated", errProtocol)
	}
	q := body[:len(body)-1]
	if !s.mayMatter(q) {
		return writeMsg(s.uw, 'Q', body)
	}
	stmts, ok := scanStatements(f.stmts[:0], q)
	f.stmts = stmts
	fences, rw, atomic := 0, false, false
	for _, st := range stmts {
		if st.fence {
			fences++
		}
		rw = rw || st.readWrite
		atomic = atomic || st.atomic
	}
	// "SHOW transaction_read_only" outside a transaction is how pgx, JDBC
	// and older libpq look for a read-write server (target_session_attrs).
	// The answer is about the next transaction, which becomes read-write
	// when fenced: the question runs in a transaction switched to
	// read-write, so the server itself answers "off".
	showRO := ok && s.required && len(stmts) == 1 && stmts[0].showRO && f.startStat == 'I'
	switch {
	case !ok:
		// PostgreSQL rejects an unterminated quote or comment: pass it on.
		return writeMsg(s.uw, 'Q', body)
	case rw && s.required:
		s.reject(CodeUnfenced, "read-write switch refused")
		f.out = queryMsg(f.out[:0], raiseReadWriteSQL)
		_, err := s.uw.Write(f.out)
		return err
	case fences == 0 && !showRO:
		return writeMsg(s.uw, 'Q', body)
	case fences > 0 && len(stmts) == 1 && f.startStat == 'I':
		f.out = queryMsg(f.out[:0], raiseAloneSQL)
		_, err := s.uw.Write(f.out)
		return err
	case atomic || f.units != 0:
		// Cannot count statements reliably: leave the fence as it is. It
		// then runs in a read-only transaction and the fence function
		// itself refuses with FG003, so nothing is protected by accident.
		return writeMsg(s.uw, 'Q', body)
	}
	// Insert the read-write switch before each fence statement.
	out := append(f.out[:0], 'Q', 0, 0, 0, 0)
	prev, added := 0, 0
	now := time.Now()
	for i, st := range stmts {
		kind := injReadWrite
		switch {
		case showRO:
			kind = injShowRW
		case !st.fence:
			continue
		}
		out = append(out, q[prev:st.start]...)
		out = append(out, setReadWriteSQL+"; "...)
		prev = st.start
		s.injections.add(injection{batch: f.batch, simple: true, at: i + added, n: 1, kind: kind, start: now})
		added++
	}
	out = append(out, q[prev:]...)
	out = append(out, 0)
	binary.BigEndian.PutUint32(out[1:5], uint32(len(out)-1))
	f.out = out
	_, err := s.uw.Write(out)
	return err
}

// frontParse forwards a Parse, remembering whether it prepares a fence.
func (s *session) frontParse(body []byte) error {
	f := &s.front
	name, rest, ok := cstring(body)
	if !ok {
		return fmt.Errorf("%w: malformed Parse message", errProtocol)
	}
	q, _, ok := cstring(rest)
	if !ok {
		return fmt.Errorf("%w: malformed Parse message", errProtocol)
	}
	if len(f.fenceStmts) > 0 {
		delete(f.fenceStmts, string(name))
	}
	if !s.mayMatter(q) {
		return writeMsg(s.uw, 'P', body)
	}
	stmts, _ := scanStatements(f.stmts[:0], q)
	f.stmts = stmts
	if len(stmts) == 1 && stmts[0].readWrite && s.required {
		s.reject(CodeUnfenced, "read-write switch refused")
		msg := append([]byte(nil), name...)
		msg = append(msg, 0)
		msg = append(msg, raiseReadWriteSQL...)
		msg = append(msg, 0, 0, 0)
		return writeMsg(s.uw, 'P', msg)
	}
	if len(stmts) == 1 && stmts[0].fence {
		f.fenceStmts[string(name)] = struct{}{}
		// Parse analysis takes the transaction's first snapshot, after
		// which it can no longer become read-write: switch first.
		if err := s.injectReadWrite(); err != nil {
			return err
		}
	}
	return writeMsg(s.uw, 'P', body)
}

// frontBind forwards a Bind, tracking portals bound to fence statements.
func (s *session) frontBind(n int) error {
	f := &s.front
	body, err := s.cf.body(n)
	if err != nil {
		return err
	}
	portal, rest, ok := cstring(body)
	if !ok {
		return fmt.Errorf("%w: malformed Bind message", errProtocol)
	}
	stmt, _, ok := cstring(rest)
	if !ok {
		return fmt.Errorf("%w: malformed Bind message", errProtocol)
	}
	if _, fence := f.fenceStmts[string(stmt)]; fence {
		f.fencePortals[string(portal)] = struct{}{}
		// Bind takes a snapshot too: switch to read-write before it.
		if err := s.injectReadWrite(); err != nil {
			return err
		}
	} else if len(f.fencePortals) > 0 {
		delete(f.fencePortals, string(portal))
	}
	return writeMsg(s.uw, 'B', body)
}

// frontExecute forwards an Execute, preceded by the read-write switch when
// the portal is a fence call.
func (s *session) frontExecute(n int) error {
	f := &s.front
	if len(f.fencePortals) == 0 {
		f.otherExecs++
		f.rwPending = false
		f.units++
		return s.cf.copyTo(s.uw, n)
	}
	body, err := s.cf.body(n)
	if err != nil {
		return err
	}
	portal, _, ok := cstring(body)
	if !ok {
		return fmt.Errorf("%w: malformed Execute message", errProtocol)
	}
	if _, fence := f.fencePortals[string(portal)]; fence {
		f.fenceExecs++
		s.injections.add(injection{batch: f.batch, at: f.units, kind: injFenceMark, start: time.Now()})
	} else {
		f.otherExecs++
	}
	f.rwPending = false
	f.units++
	return writeMsg(s.uw, 'E', body)
}

// injectReadWrite sends the read-write switch (once until the next Execute).
func (s *session) injectReadWrite() error {
	f := &s.front
	if f.rwPending {
		return nil
	}
	f.rwPending = true
	s.injections.add(injection{batch: f.batch, at: f.units, n: injectUnits, kind: injReadWrite})
	if _, err := s.uw.Write(injectReadWrite); err != nil {
		return err
	}
	f.units += injectUnits
	return nil
}
