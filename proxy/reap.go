package proxy

import (
	"context"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// The reaper (Config.ReapUpstream, Config.ReapAfter) bounds what the gate
// cannot: sessions straight to PostgreSQL that hold a fence in a stalled
// transaction, having switched the server's own
// idle_in_transaction_session_timeout off. See pgfence.Reaper for what its
// role can see and what it ends.

// reapConfig is the reaper's connection: Config.ReapUpstream's role and
// database, through the sessions' own dial (the upstream's address and TLS
// mode), over the simple protocol (the upstream may be a pooler).
func (p *Proxy) reapConfig() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(p.cfg.ReapUpstream)
	if err != nil {
		return nil, ErrBadUpstream // Validate said why; the string may hold a password
	}
	p.viaUpstream(cfg)
	return cfg, nil
}

// reapLoop runs the reaper until ctx ends.
func (p *Proxy) reapLoop(ctx context.Context, cfg *pgx.ConnConfig) {
	r := &pgfence.Reaper{Limit: p.cfg.ReapAfter}
	log := p.log.With("reaper", cfg.User, "database", cfg.Database)
	r.Run(ctx,
		func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) },
		func(e pgfence.Reaped) {
			p.metrics.SessionsReaped.Inc()
			what := "held a fence in its transaction for"
			if e.Idle {
				what = "was idle in a transaction holding a fence for"
			}
			log.Warn("reaper ended a stalled fence holder: it "+what+" longer than the limit",
				"pid", e.PID, "user", e.Role, "application_name", e.Application, "for", e.For.String(), "limit", p.cfg.ReapAfter.String())
		},
		func(err error) { log.Warn("reaper pass failed", "err", oneLine(err.Error())) })
}
