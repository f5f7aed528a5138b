package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// DefaultPruneInterval is the default Config.PruneInterval.
const DefaultPruneInterval = time.Hour

// pruneTimeout bounds one scheduled prune of one database.
const pruneTimeout = 10 * time.Minute

// pruneLoop runs the scheduled prune (Config.PruneOlderThan) every
// Config.PruneInterval until ctx ends.
func (p *Proxy) pruneLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.PruneNow(ctx)
		}
	}
}

// PruneNow runs one scheduled prune at once (Config.PruneOlderThan): it
// asks Config.PruneFloor for the floor and prunes the database the admin
// connection names, when it holds schema fencegate. It returns the floor and the first error; each database's
// outcome is logged and counted. Without PruneOlderThan it does nothing.
func (p *Proxy) PruneNow(ctx context.Context) (int64, error) {
	if p.cfg.PruneOlderThan <= 0 || p.repairer == nil || p.cfg.PruneFloor == nil {
		return 0, nil
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	floor, err := p.cfg.PruneFloor(fctx, p.cfg.PruneOlderThan)
	cancel()
	if err != nil {
		p.log.Warn("scheduled prune skipped: the token service gave no floor", "older_than", p.cfg.PruneOlderThan.String(), "err", err)
		return 0, fmt.Errorf("ask the token service for the floor %v old: %w", p.cfg.PruneOlderThan, err)
	}
	if floor <= 0 {
		p.log.Debug("scheduled prune: no token is that old yet", "older_than", p.cfg.PruneOlderThan.String())
		return 0, nil
	}
	var first error
	for _, db := range p.pruneDatabases() {
		res, err := p.repairer.prune(ctx, db, floor)
		switch {
		case errors.Is(err, errNotOurs):
			continue
		case err != nil:
			p.metrics.Prunes.WithLabelValues(db, "error").Inc()
			p.log.Warn("scheduled prune failed", "database", db, "floor", floor, "err", err)
			if first == nil {
				first = fmt.Errorf("database %q: %w", db, err)
			}
			continue
		}
		p.metrics.Prunes.WithLabelValues(db, "ok").Inc()
		p.metrics.MarksPruned.WithLabelValues(db).Add(float64(res.Deleted))
		p.metrics.PruneFloor.WithLabelValues(db).Set(float64(res.FloorAfter))
		p.log.Info("marks pruned", "database", db, "floor", res.FloorAfter, "floor_before", res.FloorBefore,
			"deleted", res.Deleted, "left_locked", res.Left, "older_than", p.cfg.PruneOlderThan.String(),
			"took", res.Took.Round(time.Millisecond).String())
	}
	return floor, first
}

// pruneDatabases returns the database the admin connection names: the
// one database whose token service Config.PruneFloor is known to be. Other
// databases the proxy serves may take their tokens from another token
// service, whose counter is not this one's: pruned to this floor, every
// holder of theirs could be refused.
func (p *Proxy) pruneDatabases() []string {
	if p.repairer.cfg.Database == "" {
		return nil
	}
	return []string{p.repairer.cfg.Database}
}

// prune prunes database db to floor through the admin connection, under
// the same rules as a repair: never a template or a database that takes
// no connections, and only a database that holds schema fencegate
// (errNotOurs otherwise).
func (r *repairer) prune(ctx context.Context, db string, floor int64) (pgfence.PruneResult, error) {
	ctx, cancel := context.WithTimeout(ctx, pruneTimeout)
	defer cancel()
	if err := r.eligible(ctx, db); err != nil {
		return pgfence.PruneResult{}, err
	}
	cfg := r.cfg.Copy()
	cfg.Database = db
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return pgfence.PruneResult{}, fmt.Errorf("connect as the admin role (%s): %w", r.describe(), err)
	}
	defer conn.Close(context.Background())
	if err := pgfence.AdminSession(ctx, conn); err != nil {
		return pgfence.PruneResult{}, fmt.Errorf("admin session (%s): %w", r.describe(), err)
	}
	var hasSchema bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regnamespace('fencegate') IS NOT NULL").Scan(&hasSchema); err != nil {
		return pgfence.PruneResult{}, fmt.Errorf("read the state of schema fencegate: %w", err)
	}
	if !hasSchema {
		return pgfence.PruneResult{}, fmt.Errorf("%w: database %q holds no schema fencegate", errNotOurs, db)
	}
	return pgfence.Prune(ctx, conn, floor, pgfence.PruneOptions{})
}
