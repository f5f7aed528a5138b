package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// dialUpstream connects to the upstream server and sets up TLS as its
// sslmode says.
func (p *Proxy) dialUpstream(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: p.cfg.DialTimeout, KeepAlive: 30 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", p.up.addr)
	if err != nil {
		return nil, fmt.Errorf("dial upstream %s: %w", p.up.addr, err)
	}
	if p.up.sslmode == "disable" {
		return c, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var req [8]byte
	binary.BigEndian.PutUint32(req[:4], 8)
	binary.BigEndian.PutUint32(req[4:], codeSSL)
	if _, err := c.Write(req[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream SSLRequest: %w", err)
	}
	var ans [1]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream SSLRequest: %w", err)
	}
	switch ans[0] {
	case 'S':
		tc := tls.Client(c, p.up.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("upstream TLS handshake: %w", err)
		}
		_ = tc.SetDeadline(time.Time{})
		return tc, nil
	case 'N':
		switch p.up.sslmode {
		case "allow", "prefer":
			_ = c.SetDeadline(time.Time{})
			return c, nil
		}
		c.Close()
		return nil, fmt.Errorf("%w (sslmode=%s)", ErrUpstreamTLS, p.up.sslmode)
	default:
		c.Close()
		return nil, fmt.Errorf("upstream answered SSLRequest with %q", ans[0])
	}
}
