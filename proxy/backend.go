package proxy

import (
	"time"
)

// backState is the backend pump's own state.
type backState struct {
	batch  uint64 // ReadyForQuery messages seen
	units  int    // response units completed in the current batch
	failed bool   // an error ended the current batch's processing
}

// completes reports whether a backend message of type typ completes the
// response to one frontend message (extended protocol) or one statement
// (simple Query).
func completes(typ byte, simple bool) bool {
	switch typ {
	case 'C', 'I':
		return true
	case '1', '2', '3', 'n', 'T', 's', 'V':
		return !simple
	}
	return false
}

// backendPump forwards upstream messages to the client until the upstream
// connection ends.
func (s *session) backendPump() {
	b := &s.back
	for {
		if s.uf.r.Buffered() == 0 {
			if err := s.cw.Flush(); err != nil {
				s.endBackend(errClientGone)
				return
			}
		}
		typ, n, err := s.uf.peekHeader()
		if err != nil {
			s.endBackend(err)
			return
		}
		var (
			inj                    injection
			swallow, fence, simple bool
		)
		if s.injections.pending.Load() > 0 {
			inj, swallow, fence, simple = s.injections.lookup(b.batch, b.units)
		}
		switch typ {
		case 'Z':
			body, err := s.uf.body(n)
			if err != nil || len(body) != 1 {
				s.endBackend(err)
				return
			}
			s.status.Store(uint32(body[0]))
			b.batch++
			b.units = 0
			b.failed = false
			if err := writeMsg(s.cw, 'Z', body); err != nil {
				s.endBackend(errClientGone)
				return
			}
			s.answered.Add(1)
			if body[0] == 'I' && s.p.draining.Load() && s.sent.Load() == s.answered.Load() {
				_ = s.cw.Flush()
				s.setClosing(errDraining)
				s.endBackend(errDraining)
				return
			}
			continue
		case 'E':
			body, err := s.uf.body(n)
			if err != nil {
				s.endBackend(err)
				return
			}
			out := s.mapError(body, inj, swallow, fence)
			b.failed = true
			if err := writeMsg(s.cw, 'E', out); err != nil {
				s.endBackend(errClientGone)
				return
			}
			continue
		case 'S':
			body, err := s.uf.body(n)
			if err != nil {
				s.endBackend(err)
				return
			}
			if err := s.checkParameter(body); err != nil {
				_ = s.cw.Flush()
				s.endBackend(err)
				return
			}
			if err := writeMsg(s.cw, 'S', s.presented(body)); err != nil {
				s.endBackend(errClientGone)
				return
			}
			continue
		case 'A':
			swallow = false
		}
		if swallow {
			_, err = s.uf.body(n)
		} else {
			err = s.uf.copyTo(s.cw, n)
		}
		if err != nil {
			s.endBackend(err)
			return
		}
		if !b.failed && completes(typ, simple) {
			if fence && typ == 'C' {
				s.p.metrics.FencesAccepted.Inc()
				s.p.metrics.FenceSeconds.Observe(time.Since(inj.start).Seconds())
			}
			b.units++
		}
	}
}

// mapError rewrites upstream errors that mean a fencing rule was broken
// into the proxy's own SQLSTATEs, and counts and logs fencegate errors.
func (s *session) mapError(body []byte, inj injection, swallow, fence bool) []byte {
	e, err := decodeError(body)
	if err != nil {
		return body
	}
	changed := false
	switch {
	case swallow && inj.kind == injReadWrite && e.Code == "25001":
		// SET TRANSACTION READ WRITE after the first query, or in a
		// subtransaction: the fence is not first in its transaction.
		e.Code = CodeMisuse
		e.Message = "fencegate: fencegate.fence must be the first statement of its transaction (" + e.Message + ")"
		e.Hint = "Send BEGIN, then SELECT fencegate.fence(resource, token), then the transaction's reads and writes; not inside a savepoint."
		changed = true
	case e.Code == "25006" && s.required:
		e.Code = CodeUnfenced
		e.Message = "fencegate: write in a transaction that took no fence (" + e.Message + ")"
		e.Hint = "Begin the transaction with SELECT fencegate.fence(resource, token) using the token of the lock you hold."
		changed = true
	}
	switch e.Code {
	case CodeStaleToken, CodeUnfenced, CodeMisuse:
		s.reject(e.Code, e.Message)
	}
	if fence {
		s.p.metrics.FenceSeconds.Observe(time.Since(inj.start).Seconds())
	}
	if !changed {
		return body
	}
	e.SeverityUnlocalized = e.Severity
	out, err := e.Encode(nil)
	if err != nil {
		return body
	}
	return out[5:]
}
