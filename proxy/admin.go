package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// installTimeout bounds one install or repair through the admin connection.
const installTimeout = 30 * time.Second

// keeper installs and repairs the fencegate schema through the admin
// connection (Config.AdminUpstream), one database at a time.
type keeper struct {
	cfg   *pgx.ConnConfig // the admin connection; Database is replaced per database
	owner string          // Config.SchemaOwnerRole
	log   *slog.Logger
	m     *Metrics

	mu  sync.Mutex
	dbs map[string]*dbKeeper
}

// dbKeeper serializes the repairs of one database.
type dbKeeper struct {
	mu       sync.Mutex
	repaired time.Time // when the last successful repair began
}

func newKeeper(dsn, owner string, log *slog.Logger, m *Metrics) (*keeper, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// The parse error may quote the string, password and all.
		return nil, fmt.Errorf("%w: the admin connection string does not parse (want postgres://user:password@host:port/db?sslmode=... or host=... user=... key=value pairs)", ErrBadUpstream)
	}
	return &keeper{cfg: cfg, owner: owner, log: log, m: m, dbs: map[string]*dbKeeper{}}, nil
}

// describe names the admin connection for logs: user, host and port, no
// password.
func (k *keeper) describe() string {
	return fmt.Sprintf("user=%s host=%s port=%d", k.cfg.User, k.cfg.Host, k.cfg.Port)
}

func (k *keeper) db(name string) *dbKeeper {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.dbs[name]
	if d == nil {
		d = &dbKeeper{}
		k.dbs[name] = d
	}
	return d
}

// repair installs or upgrades the schema of database db, which a session
// found unsound (problems) in a check that began at checked. Sessions that
// find the same problems at once wait for one repair rather than each
// making their own.
func (k *keeper) repair(ctx context.Context, db string, checked time.Time, problems []string) error {
	d := k.db(db)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.repaired.After(checked) {
		return nil // repaired since this session looked
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	cfg := k.cfg.Copy()
	cfg.Database = db
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect as the admin role (%s): %w", k.describe(), err)
	}
	defer conn.Close(context.Background())
	rep, err := install(ctx, conn, k.owner)
	if err != nil {
		return fmt.Errorf("install the fencegate schema as the admin role (%s): %w", k.describe(), err)
	}
	d.repaired = began
	k.m.SchemaRepairs.WithLabelValues(db).Inc()
	k.log.Warn("fencegate schema repaired through the admin connection", "database", db,
		"problems", strings.Join(problems, "; "), "from_version", rep.FromVersion, "to_version", rep.ToVersion,
		"actions", strings.Join(rep.Actions, "; "), "warnings", strings.Join(rep.Warnings, "; "),
		"admin", k.describe(), "took", time.Since(began).Round(time.Millisecond).String())
	return nil
}
