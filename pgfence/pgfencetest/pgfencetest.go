// Package pgfencetest gives tests a throwaway PostgreSQL database with
// schema fencegate installed, a unique owner role and an application role
// that holds only the application grants. It talks to the real server named
// by FENCEGATE_TEST_PG (default postgres://postgres@127.0.0.1:5432/postgres);
// a server that is not reachable fails the test. Everything it creates
// (database, roles) is dropped when the test ends. It is for tests, not a
// stable API.
package pgfencetest

import (
	"context"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
	"github.com/jackc/pgx/v5"
)

// DB is a database with schema fencegate installed.
type DB struct {
	// DSN connects to the database as the server's superuser.
	DSN string
	// Owner is the NOLOGIN role that owns schema fencegate.
	Owner string
	// App is a LOGIN role with the application grants (USAGE on schema
	// fencegate, EXECUTE on fence and fence_many, SELECT on the marks) and
	// no rights on any table until the test grants them.
	App string
	// AppDSN connects to the database as App.
	AppDSN string
	// Report is what Install did.
	Report *pgfence.Report
}

// Options tunes New.
type Options struct {
	// NoInstall leaves the database without schema fencegate (the roles
	// are still created).
	NoInstall bool
	// GuardDDL installs the DDL guard.
	GuardDDL bool
}

// New creates a database, an owner role and an application role, and
// installs schema fencegate.
func New(t testing.TB, opts ...Options) *DB {
	t.Helper()
	testutil.NeedServices(t)
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	dsn := testutil.PostgresDB(t)
	d := &DB{DSN: dsn, Owner: testutil.RandomName("fg_owner_"), App: testutil.RandomName("fg_app_")}
	dropRoleAtCleanup(t, dsn, d.Owner)
	dropRoleAtCleanup(t, dsn, d.App)
	d.AppDSN = WithUser(t, dsn, d.App)
	conn := Connect(t, dsn)
	f, err := fenceddb.Setup(context.Background(), conn, fenceddb.Options{Owner: d.Owner, App: d.App, GuardDDL: o.GuardDDL, NoInstall: o.NoInstall})
	if err != nil {
		t.Fatalf("set up the fenced database: %v", err)
	}
	d.Report = f.Report
	return d
}

// Role creates a role with a unique name starting with prefix and the given
// attributes (e.g. "LOGIN", "NOLOGIN", "LOGIN CREATEROLE"). When the test
// ends, whatever it owns or was granted in the database of dsn is dropped,
// then the role.
func Role(t testing.TB, dsn, prefix, attrs string) string {
	t.Helper()
	name := testutil.RandomName(prefix)
	admin := testutil.PostgresAdminDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("PostgreSQL not reachable at %s: %v (start it, or set FENCEGATE_TEST_PG)", admin, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE ROLE "+name+" "+attrs); err != nil {
		t.Fatalf("create role %s: %v", name, err)
	}
	dropRoleAtCleanup(t, dsn, name)
	return name
}

// dropRoleAtCleanup drops role name when the test ends, after what it owns
// or was granted in the database of dsn and in the server's. The roles a
// test registers for one database are dropped together, newest first, by
// one cleanup (registered with the first of them) over one connection to
// that database and one to the server's: on a small machine a connection
// costs PostgreSQL tens of milliseconds of CPU, and a fixture has three
// roles.
func dropRoleAtCleanup(t testing.TB, dsn, name string) {
	k := dropKey{t, dsn}
	dropMu.Lock()
	names, ok := dropLists[k]
	if !ok {
		names = new([]string)
		dropLists[k] = names
	}
	*names = append(*names, name)
	dropMu.Unlock()
	if ok {
		return
	}
	admin := testutil.PostgresAdminDSN()
	t.Cleanup(func() {
		dropMu.Lock()
		roles := slices.Clone(*names)
		delete(dropLists, k)
		dropMu.Unlock()
		slices.Reverse(roles)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			for _, r := range roles {
				_, _ = c.Exec(ctx, "DROP OWNED BY "+r+" CASCADE")
			}
			c.Close(ctx)
		}
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop roles %v: %v", roles, err)
			return
		}
		defer c.Close(ctx)
		for _, r := range roles {
			_, _ = c.Exec(ctx, "DROP OWNED BY "+r+" CASCADE")
			if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+r); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		}
	})
}

// dropKey names the roles one test registered for one database.
type dropKey struct {
	t   testing.TB
	dsn string
}

var (
	dropMu    sync.Mutex
	dropLists = map[dropKey]*[]string{}
)

// WithUser returns dsn with its user replaced by user (no password: the test
// server trusts local connections).
func WithUser(t testing.TB, dsn, user string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	u.User = url.User(user)
	return u.String()
}

// Connect opens a connection that is closed when the test ends.
func Connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Admin connects to the database as the superuser.
func (d *DB) Admin(t testing.TB) *pgx.Conn { t.Helper(); return Connect(t, d.DSN) }

// AppConn connects to the database as the application role.
func (d *DB) AppConn(t testing.TB) *pgx.Conn { t.Helper(); return Connect(t, d.AppDSN) }

// Exec runs sql as the superuser and fails the test on error.
func (d *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	conn := Connect(t, d.DSN)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
