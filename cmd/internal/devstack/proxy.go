package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/internal/servers"

	"github.com/fencegate/fencegate/proxy"
)

// ProxyOptions configures StartProxy.
type ProxyOptions struct {
	// Listen is the proxy's address (HOST:PORT; port 0 for a free one).
	Listen string
	// Upstream is the PostgreSQL server (a DSN; only its host, port and TLS
	// settings are used: clients bring their own user and database).
	Upstream string
	// AdminUpstream, when set, lets the proxy install or repair schema
	// fencegate in a client's database as this administrator
	// (proxy.Config.AdminUpstream); OwnerRole is the role the schema then
	// belongs to (proxy.Config.SchemaOwnerRole).
	AdminUpstream, OwnerRole string
	Logger                   *slog.Logger
}

// devDrain is how long stop lets open sessions finish.
const devDrain = time.Second

// StartProxy starts the fencegate proxy in this process. stop shuts it
// down, letting sessions finish for up to a second: this is a development
// stack stopped by Ctrl-C, where a user waits for the prompt, not a
// production gate draining its clients (fencegate proxy --drain-timeout).
func StartProxy(o ProxyOptions) (addr string, stop func() error, err error) {
	p, err := proxy.New(proxy.Config{Listen: o.Listen, Upstream: o.Upstream, AdminUpstream: o.AdminUpstream,
		SchemaOwnerRole: o.OwnerRole, Logger: o.Logger})
	if err != nil {
		return "", nil, fmt.Errorf("devstack: proxy: %w", err)
	}
	if err := p.Start(); err != nil {
		if servers.IsAddrInUse(err) {
			return "", nil, fmt.Errorf("%w: %s (proxy) is taken: %v", servers.ErrPortInUse, o.Listen, err)
		}
		return "", nil, fmt.Errorf("devstack: start proxy: %w", err)
	}
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), devDrain)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			return p.Close()
		}
		return nil
	}
	return p.Addr(), stop, nil
}
