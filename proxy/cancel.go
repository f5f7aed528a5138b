package proxy

import (
	"context"
	"encoding/binary"
	"time"
)

// forwardCancel sends a CancelRequest for the session holding key k to its
// upstream backend. Unknown keys are ignored, as PostgreSQL does.
func (p *Proxy) forwardCancel(k uint64) {
	s := p.sessionByKey(k)
	if s == nil || s.upSecret == nil {
		p.log.Debug("cancel request for unknown key ignored")
		return
	}
	c, err := p.dialUpstream(context.Background())
	if err != nil {
		p.log.Warn("forward cancel request", "session", s.id, "err", err)
		return
	}
	defer c.Close()
	b := make([]byte, 12, 12+len(s.upSecret))
	binary.BigEndian.PutUint32(b[0:], uint32(12+len(s.upSecret)))
	binary.BigEndian.PutUint32(b[4:], codeCancel)
	binary.BigEndian.PutUint32(b[8:], s.upPID)
	b = append(b, s.upSecret...)
	if _, err := c.Write(b); err != nil {
		p.log.Warn("forward cancel request", "session", s.id, "err", err)
		return
	}
	// PostgreSQL closes the connection after reading the request; wait for
	// that so the cancel is in flight before the client hears back.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Read(make([]byte, 1))
	p.log.Debug("cancel request forwarded", "session", s.id)
}
