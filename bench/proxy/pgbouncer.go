package main

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/pgbouncer"
	"github.com/fencegate/fencegate/internal/proc"
)

// startBouncer writes the configuration into dir and starts PgBouncer under
// g, returning its port and process id once it answers a query.
func startBouncer(ctx context.Context, g *proc.Group, bin, dir string, up pgbenchTarget, poolSize int) (port, pid int, err error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return 0, 0, err
	}
	// Session pooling: each client keeps one server connection, as with
	// the proxy and direct.
	cfg := pgbouncer.Config{
		ListenPort: ports[0], Database: up.db, UpstreamHost: up.host, UpstreamPort: up.port,
		Mode: pgbouncer.SessionPooling, Users: []string{up.user}, PoolSize: poolSize,
		MaxClientConn: max(100, 2*poolSize), Settings: map[string]string{"log_pooler_errors": "1"},
	}
	p, err := pgbouncer.Launch(g, bin, dir, cfg)
	if err != nil {
		return 0, 0, err
	}
	target := up
	target.port = cfg.ListenPort
	if err := p.WaitReady(ctx, 20*time.Millisecond, 30*time.Second, sqlReady(target)); err != nil {
		return 0, 0, err
	}
	return cfg.ListenPort, p.Pid(), nil
}
