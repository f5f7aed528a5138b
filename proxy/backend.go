package proxy

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
		}
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
