package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/proxy"
)

// StartProxy starts the fencing proxy in this process on listen, in front of
// the PostgreSQL at upstream (a DSN; only its host, port and TLS settings
// are used). stop shuts it down, letting sessions finish for up to 5s.
func StartProxy(listen, upstream string, log *slog.Logger) (addr string, stop func() error, err error) {
	p, err := proxy.New(proxy.Config{Listen: listen, Upstream: upstream, Logger: log})
	if err != nil {
		return "", nil, fmt.Errorf("devstack: proxy: %w", err)
	}
	if err := p.Start(); err != nil {
		if IsAddrInUse(err) {
			return "", nil, fmt.Errorf("%w: %s (proxy) is taken: %v", ErrPortInUse, listen, err)
		}
		return "", nil, fmt.Errorf("devstack: start proxy: %w", err)
	}
	stop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			return p.Close()
		}
		return nil
	}
	return p.Addr(), stop, nil
}
