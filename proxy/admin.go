package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// installTimeout bounds one install or repair through the admin connection.
const installTimeout = 30 * time.Second

// keeper installs and repairs the fencegate schema through the admin
// connection (Config.AdminUpstream), one database at a time.
//
// It repairs only what is fencegate's: a database that already holds schema
// fencegate, or the one database the admin connection string names (where
// it also installs the schema from nothing). It never touches a template
// (datistemplate: whatever it installed there would be copied into every
// database created from it) nor a database that refuses connections. A
// client chooses the database it names in its startup message; without
// this rule any client could have the administrator install into any
// database of the server, template1 included.
//
// Every admin session it opens is pinned (pgfence.AdminSession), and the
// repair's lock waits are bounded by pgfence.RepairLockTimeout.
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
	if err := k.eligible(ctx, db); err != nil {
		return err
	}
	cfg := k.cfg.Copy()
	cfg.Database = db
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect as the admin role (%s): %w", k.describe(), err)
	}
	defer conn.Close(context.Background())
	if err := pgfence.AdminSession(ctx, conn); err != nil {
		return fmt.Errorf("admin session (%s): %w", k.describe(), err)
	}
	var hasSchema bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regnamespace('fencegate') IS NOT NULL").Scan(&hasSchema); err != nil {
		return fmt.Errorf("read the state of schema fencegate: %w", err)
	}
	if !hasSchema && db != k.cfg.Database {
		return fmt.Errorf("%w: database %q holds no schema fencegate, and the admin connection names database %q; install the schema into %q with \"fencegate schema install\"",
			errNotOurs, db, k.cfg.Database, db)
	}
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

// eligible refuses, before connecting to it, a database the keeper must
// never change: a template, or one that takes no connections. It asks in
// the admin connection's own database.
func (k *keeper) eligible(ctx context.Context, db string) error {
	conn, err := pgx.ConnectConfig(ctx, k.cfg.Copy())
	if err != nil {
		return fmt.Errorf("connect as the admin role (%s): %w", k.describe(), err)
	}
	defer conn.Close(context.Background())
	if err := pgfence.AdminSession(ctx, conn); err != nil {
		return fmt.Errorf("admin session (%s): %w", k.describe(), err)
	}
	var template, allowConn bool
	err = conn.QueryRow(ctx, "SELECT d.datistemplate, d.datallowconn FROM pg_catalog.pg_database d WHERE d.datname = $1::pg_catalog.text", db).Scan(&template, &allowConn)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: database %q does not exist", errNotOurs, db)
	case err != nil:
		return fmt.Errorf("read database %q: %w", db, err)
	case template:
		return fmt.Errorf("%w: database %q is a template (datistemplate), which the proxy never changes", errNotOurs, db)
	case !allowConn:
		return fmt.Errorf("%w: database %q takes no connections (datallowconn is false)", errNotOurs, db)
	}
	return nil
}
