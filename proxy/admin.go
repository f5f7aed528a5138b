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

// repairer repairs the fencegate schema through the admin connection
// (Config.AdminUpstream), one database at a time, installing it where it
// may (see below); the same connection prunes marks (prune.go).
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
type repairer struct {
	cfg      *pgx.ConnConfig // the admin connection; Database is replaced per database
	owner    string          // Config.SchemaOwnerRole
	interval time.Duration   // Config.RepairInterval
	log      *slog.Logger
	m        *Metrics

	mu  sync.Mutex
	dbs map[string]*dbRepairs
}

// dbRepairs serializes the checks and repairs of one database, and keeps
// the last verdict of the admin connection on it.
type dbRepairs struct {
	mu   sync.Mutex
	last verdict
}

// verdict is what the admin connection found in a database. A client's
// session decides nothing here: it only asks.
type verdict struct {
	checked  time.Time // when the admin connection's check began (zero: never)
	problems []string  // its HealthQuery rows then (after a repair, if one ran)
	err      error     // why it could not check, or could not repair
	// tried is when the last repair began (zero: never); repaired whether
	// it succeeded.
	tried    time.Time
	repaired bool
}

func newRepairer(dsn, owner string, interval time.Duration, log *slog.Logger, m *Metrics) (*repairer, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// The parse error may quote the string, password and all.
		return nil, fmt.Errorf("%w: the admin connection string does not parse (want postgres://user:password@host:port/db?sslmode=... or host=... user=... key=value pairs)", ErrBadUpstream)
	}
	return &repairer{cfg: cfg, owner: owner, interval: interval, log: log, m: m, dbs: map[string]*dbRepairs{}}, nil
}

// describe names the admin connection for logs: user, host and port, no
// password.
func (r *repairer) describe() string {
	return fmt.Sprintf("user=%s host=%s port=%d", r.cfg.User, r.cfg.Host, r.cfg.Port)
}

func (r *repairer) db(name string) *dbRepairs {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.dbs[name]
	if d == nil {
		d = &dbRepairs{}
		r.dbs[name] = d
	}
	return d
}

// fresh reports whether t is less than the repairer's interval ago.
func (r *repairer) fresh(t time.Time) bool {
	return !t.IsZero() && r.interval > 0 && time.Since(t) < r.interval
}

// judge returns the admin connection's own verdict on the schema of
// database db, which a session found unsound in a check that began at
// asked. Sessions that ask at once wait for one check. The admin
// connection checks at most once per interval: a verdict from a check that
// began after the session's, or less than the interval ago, is returned as
// it is. When its own check finds a problem it repairs the schema, at most
// once per interval, and checks again. What the session saw is never a
// reason to repair: a session's settings can change what the health query
// prints, the admin connection's are pinned (pgfence.AdminSession).
func (r *repairer) judge(ctx context.Context, db string, asked time.Time) verdict {
	d := r.db(db)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last.checked.After(asked) || r.fresh(d.last.checked) {
		return d.last
	}
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	v := verdict{checked: time.Now(), tried: d.last.tried}
	v.problems, v.err = r.check(ctx, db)
	if v.err == nil && len(v.problems) > 0 && !r.fresh(d.last.tried) {
		v.tried = time.Now()
		v.err = r.repair(ctx, db, v.problems)
		v.repaired = v.err == nil
		if v.err == nil {
			v.problems, v.err = r.check(ctx, db)
		}
	}
	d.last = v
	return v
}

// connect opens an admin session (pinned) to database db, after checking
// that the repairer may change it.
func (r *repairer) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	if err := r.eligible(ctx, db); err != nil {
		return nil, err
	}
	cfg := r.cfg.Copy()
	cfg.Database = db
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect as the admin role (%s): %w", r.describe(), err)
	}
	if err := pgfence.AdminSession(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("admin session (%s): %w", r.describe(), err)
	}
	return conn, nil
}

// check runs the health query on an admin session of database db.
func (r *repairer) check(ctx context.Context, db string) ([]string, error) {
	conn, err := r.connect(ctx, db)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	problems, err := runHealthQuery(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("check the schema as the admin role (%s): %w", r.describe(), err)
	}
	return problems, nil
}

// repair installs or upgrades the schema of database db, which the admin
// connection found unsound (problems).
func (r *repairer) repair(ctx context.Context, db string, problems []string) error {
	began := time.Now()
	conn, err := r.connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var hasSchema bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regnamespace('fencegate') IS NOT NULL").Scan(&hasSchema); err != nil {
		return fmt.Errorf("read the state of schema fencegate: %w", err)
	}
	if !hasSchema && db != r.cfg.Database {
		return fmt.Errorf("%w: database %q holds no schema fencegate, and the admin connection names database %q; install the schema into %q with \"fencegate schema install\"",
			errNotOurs, db, r.cfg.Database, db)
	}
	rep, err := install(ctx, conn, r.owner)
	if err != nil {
		return fmt.Errorf("install the fencegate schema as the admin role (%s): %w", r.describe(), err)
	}
	r.m.SchemaRepairs.WithLabelValues(db).Inc()
	r.log.Warn("fencegate schema repaired through the admin connection", "database", db,
		"problems", strings.Join(problems, "; "), "from_version", rep.FromVersion, "to_version", rep.ToVersion,
		"actions", strings.Join(rep.Actions, "; "), "warnings", strings.Join(rep.Warnings, "; "),
		"admin", r.describe(), "took", time.Since(began).Round(time.Millisecond).String())
	return nil
}

// eligible refuses, before connecting to it, a database the repairer must
// never change: a template, or one that takes no connections. It asks in
// the admin connection's own database.
func (r *repairer) eligible(ctx context.Context, db string) error {
	conn, err := pgx.ConnectConfig(ctx, r.cfg.Copy())
	if err != nil {
		return fmt.Errorf("connect as the admin role (%s): %w", r.describe(), err)
	}
	defer conn.Close(context.Background())
	if err := pgfence.AdminSession(ctx, conn); err != nil {
		return fmt.Errorf("admin session (%s): %w", r.describe(), err)
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

// errOrphans: schema fencegate is missing while tables still carry the
// column protect() adds: it was dropped, with its marks.
var errOrphans = errors.New("schema fencegate is missing, but tables still carry its resource column, so it was dropped with every mark it held")

// install installs or repairs the schema through an admin connection,
// owned by owner (empty: pgfence's default, the current owner when it is a
// usable one). It does not install from nothing over tables that were
// protected before: reinstalling would leave them unprotected and accept
// every old token again.
func install(ctx context.Context, conn *pgx.Conn, owner string) (*pgfence.Report, error) {
	var orphans []string
	err := conn.QueryRow(ctx, `SELECT CASE WHEN pg_catalog.to_regnamespace('fencegate') IS NULL THEN ARRAY(
			SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_attribute a
			JOIN pg_catalog.pg_class c ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE a.attname = 'fencegate_resource' AND NOT a.attisdropped AND a.attnum > 0 AND c.relkind IN ('r', 'p')
			ORDER BY 1) END`).Scan(&orphans)
	if err != nil {
		return nil, fmt.Errorf("read the state of schema fencegate: %w", err)
	}
	if len(orphans) > 0 {
		return nil, fmt.Errorf("%w (%s): an administrator decides: reinstall (fencegate schema install), then protect those tables again", errOrphans, strings.Join(orphans, ", "))
	}
	return pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: owner})
}
