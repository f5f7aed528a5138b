package proxy

import "encoding/binary"

// backendPump forwards upstream messages to the client, unchanged, until
// the upstream connection ends. It looks at the type byte of each message;
// it reads the body of ReadyForQuery (the transaction status),
// ErrorResponse (metrics and logs), and peeks at RowDescription and
// CommandComplete (fences accepted).
func (s *session) backendPump() {
	t := &s.track
	m := s.p.metrics
	for {
		if s.upstreamFrames.r.Buffered() == 0 {
			if err := s.clientWriter.Flush(); err != nil {
				s.endBackend(errClientGone)
				return
			}
			// One read takes everything the socket holds; the batch
			// below then handles every whole message of it.
			if _, err := s.upstreamFrames.r.Peek(5); err != nil {
				s.endBackend(err)
				return
			}
		}
		if ended, moved := s.backendBatch(); ended {
			return
		} else if moved {
			continue
		}
		// One message the batch leaves alone: an ErrorResponse, one not
		// yet whole in the buffer, or a bad header.
		typ, n, err := s.upstreamFrames.peekHeader()
		if err != nil {
			s.endBackend(err)
			return
		}
		switch typ {
		case 'Z':
			body, err := s.upstreamFrames.body(n)
			if err != nil || len(body) != 1 {
				s.endBackend(err)
				return
			}
			closeNow := t.ready(body[0], s.p.draining.Load())
			if s.stallTimer != nil && (body[0] == 'T' || body[0] == 'E') {
				s.stallTimer.Reset(s.p.cfg.IdleInTransactionTimeout)
			}
			if err := writeMsg(s.clientWriter, 'Z', body); err != nil {
				s.endBackend(errClientGone)
				return
			}
			if closeNow {
				_ = s.clientWriter.Flush()
				s.setClosing(errDraining)
				s.endBackend(errDraining)
				return
			}
			continue
		case 'E':
			body, err := s.upstreamFrames.body(n)
			if err != nil {
				s.endBackend(err)
				return
			}
			t.errorResponse()
			s.countError(body)
			if err := writeMsg(s.clientWriter, 'E', body); err != nil {
				s.endBackend(errClientGone)
				return
			}
			continue
		case 'T':
			fence := false
			if n == 26 || n == 31 {
				b, _ := s.upstreamFrames.r.Peek(5 + n)
				fence = len(b) == 5+n && isFenceRow(b[5:])
			}
			t.rowDescription(fence)
		case 'C':
			b, _ := s.upstreamFrames.r.Peek(5 + min(n, 32))
			if len(b) >= 5 {
				if a := t.commandComplete(b[5:]); a.fences > 0 {
					m.FencesAccepted.Add(float64(a.fences))
					m.FenceSeconds.Observe(a.latency.Seconds())
				}
			}
		case '1', '2', '3', 't', 'n', 'I', 's', 'G', 'W':
			t.response(typ)
		}
		if err := s.upstreamFrames.copyTo(s.clientWriter, n); err != nil {
			s.endBackend(err)
			return
		}
	}
}

// backendBatch handles every whole message at the front of the upstream
// reader's buffer but ErrorResponse, under one lock of the request tracker,
// and copies them to the client's writer in one piece. It reports whether
// the session ended (a drain closed it at a ReadyForQuery) and whether it
// consumed anything; it stops at the first message it leaves to the
// per-message path (an ErrorResponse, a message not whole in the buffer, a
// bad header), which the backend pump then handles as before.
func (s *session) backendBatch() (ended, moved bool) {
	r := s.upstreamFrames.r
	buf, _ := r.Peek(r.Buffered())
	t := &s.track
	m := s.p.metrics
	off, closeNow, inTx := 0, false, false
	t.mu.Lock()
	for !closeNow && len(buf)-off >= 5 {
		typ := buf[off]
		n := int(int32(binary.BigEndian.Uint32(buf[off+1:]))) - 4
		if n < 0 || n > s.upstreamFrames.max-4 || len(buf)-off-5 < n {
			break
		}
		body := buf[off+5 : off+5+n]
		switch typ {
		case 'Z':
			if n != 1 {
				goto done
			}
			closeNow = t.readyLocked(body[0], s.p.draining.Load())
			inTx = inTx || body[0] == 'T' || body[0] == 'E'
		case 'E':
			goto done
		case 'T':
			t.rowDescriptionLocked((n == 26 || n == 31) && isFenceRow(body))
		case 'C':
			if a := t.commandCompleteLocked(body[:min(n, 32)]); a.fences > 0 {
				m.FencesAccepted.Add(float64(a.fences))
				m.FenceSeconds.Observe(a.latency.Seconds())
			}
		case '1', '2', '3', 't', 'n', 'I', 's', 'G', 'W':
			t.responseLocked(typ)
		}
		off += 5 + n
	}
done:
	t.wake()
	t.mu.Unlock()
	if off == 0 {
		return false, false
	}
	if inTx && s.stallTimer != nil {
		s.stallTimer.Reset(s.p.cfg.IdleInTransactionTimeout)
	}
	err := sendBatch(s.clientWriter, s.clientRef, buf[:off], off == len(buf))
	_, _ = r.Discard(off)
	if err != nil {
		s.endBackend(errClientGone)
		return true, true
	}
	if closeNow {
		_ = s.clientWriter.Flush()
		s.setClosing(errDraining)
		s.endBackend(errDraining)
		return true, true
	}
	return false, true
}
