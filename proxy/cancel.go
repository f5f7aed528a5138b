package proxy

import (
	"context"
	"encoding/binary"
	"time"
)

// Cancel keys. The client of a session receives the upstream's own process
// ID and a random secret of the proxy's; the proxy keeps the upstream's
// secret. A CancelRequest is matched on both (the process ID alone is no
// secret: pg_stat_activity shows it to every role) and sent on with the
// upstream's secret, so a client can cancel only its own session's query,
// and only through the proxy. The map is keyed by process ID and holds a
// list: a backend's process ID may be reused by the server while the
// proxy still winds down the session that had it.

// forwardCancel sends a CancelRequest for the session whose client holds
// pid and secret to its upstream backend. Unknown keys are ignored, as
// PostgreSQL does.
func (p *Proxy) forwardCancel(pid uint32, secret []byte) {
	s := p.sessionByKey(pid, secret)
	if s == nil {
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
