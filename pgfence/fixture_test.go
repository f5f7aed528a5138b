package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fixture is a database with schema fencegate, a data owner role (NOLOGIN)
// owning schema shop and its tables, and the application role db.App, which
// may read and write them (SELECT, INSERT, UPDATE, DELETE) and owns schema
// app for its own views, rules and functions.
//
// A fixture reached through the gate proxy (newFixtureVia(t, viaProxy))
// gives the same database, but app and every connection opened with
// appConn go through a proxy in front of it, and superConn through a second
// proxy started with AllowPrivilegedRoles. admin is always direct: it is the
// referee that reads the tables and marks.
type fixture struct {
	db    *pgfencetest.DB
	data  string // the role owning schema shop
	admin *pgx.Conn
	app   *pgx.Conn
	// via is how the application role's connections reach PostgreSQL.
	via path
	// appDSN connects as the application role along via.
	appDSN string
	// superDSN connects as the superuser along via.
	superDSN string
}

// path is a way to PostgreSQL.
type path string

const (
	direct   path = "direct"
	viaProxy path = "proxy"
)

// fixtureSQL builds schema shop. Protected: orders ('order:' || id), lines
// ('order:' || order_id, cascading from orders), notes ('note:' || id, SET
// NULL from orders), events (partitioned by account, with a sub-partitioned
// partition; 'acct:' || account), ledger (with an inheritance child; 'acct:'
// || acct). customers is not protected; deleting a customer cascades into
// orders.
const fixtureSQL = `
CREATE SCHEMA shop AUTHORIZATION %[1]s;
SET ROLE %[1]s;
CREATE TABLE shop.customers (id int PRIMARY KEY, name text);
CREATE TABLE shop.orders (id int PRIMARY KEY, customer int REFERENCES shop.customers ON DELETE CASCADE, state text, amount numeric);
CREATE TABLE shop.lines (order_id int REFERENCES shop.orders ON DELETE CASCADE ON UPDATE CASCADE, n int, qty int, PRIMARY KEY (order_id, n));
CREATE TABLE shop.notes (id int PRIMARY KEY, order_id int REFERENCES shop.orders ON DELETE SET NULL, body text);
CREATE TABLE shop.events (id int, account int, body text) PARTITION BY RANGE (account);
CREATE TABLE shop.events_p0 PARTITION OF shop.events FOR VALUES FROM (0) TO (100);
CREATE TABLE shop.events_p1 PARTITION OF shop.events FOR VALUES FROM (100) TO (200) PARTITION BY HASH (id);
CREATE TABLE shop.events_p1a PARTITION OF shop.events_p1 FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE shop.events_p1b PARTITION OF shop.events_p1 FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE shop.ledger (id int, acct int, amt int);
CREATE TABLE shop.ledger_2024 () INHERITS (shop.ledger);
INSERT INTO shop.customers VALUES (1, 'ann'), (2, 'bob');
INSERT INTO shop.orders VALUES (1, 1, 'new', 10), (2, 1, 'new', 20), (3, 1, 'new', 30), (4, 1, 'new', 40), (5, 1, 'new', 50), (6, 2, 'new', 60), (7, 2, 'new', 70);
INSERT INTO shop.lines VALUES (1, 1, 1), (2, 1, 2), (3, 1, 3), (5, 1, 5), (6, 1, 6);
INSERT INTO shop.notes VALUES (1, 4, 'gift'), (2, 1, 'fragile');
INSERT INTO shop.events VALUES (1, 5, 'a'), (2, 50, 'b'), (100, 150, 'c'), (101, 151, 'd');
INSERT INTO shop.ledger VALUES (1, 7, 100);
INSERT INTO shop.ledger_2024 VALUES (2, 8, 200);
RESET ROLE;
GRANT USAGE ON SCHEMA shop TO %[2]s;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA shop TO %[2]s;
CREATE SCHEMA app AUTHORIZATION %[2]s;
SELECT fencegate.protect('shop.orders', $$'order:' || id$$);
SELECT fencegate.protect('shop.lines', $$'order:' || order_id$$);
SELECT fencegate.protect('shop.notes', $$'note:' || id$$);
SELECT fencegate.protect('shop.events', $$'acct:' || account$$);
SELECT fencegate.protect('shop.ledger', $$'acct:' || acct$$);
`

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureVia(t, direct)
}

// newFixtureVia is newFixture with the application role's connections (and
// superConn's) reaching PostgreSQL along via.
func newFixtureVia(t *testing.T, via path) *fixture {
	t.Helper()
	db := pgfencetest.New(t)
	f := &fixture{db: db, via: via, appDSN: db.AppDSN, superDSN: db.DSN}
	if via == viaProxy {
		f.appDSN = proxytest.Start(t, db.AppDSN)
		f.superDSN = proxytest.Start(t, db.DSN, proxytest.AllowPrivilegedRoles())
	}
	f.data = pgfencetest.Role(t, db.DSN, "fg_data_", "NOLOGIN")
	f.admin = db.Admin(t)
	if _, err := f.admin.Exec(context.Background(), fmt.Sprintf(fixtureSQL, f.data, db.App), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	f.app = f.appConn(t)
	return f
}

// appConn opens another connection as the application role along f.via.
func (f *fixture) appConn(t *testing.T) *pgx.Conn {
	t.Helper()
	return pgfencetest.Connect(t, f.appDSN)
}

// superConn opens a connection as the superuser along f.via.
func (f *fixture) superConn(t *testing.T) *pgx.Conn {
	t.Helper()
	return pgfencetest.Connect(t, f.superDSN)
}

// snapshot is the content of every table of schema shop and of the marks,
// as text, to compare before and after an attempt.
func (f *fixture) snapshot(t *testing.T) string {
	t.Helper()
	return f.dataSnapshot(t) + f.marksSnapshot(t)
}

// marksSnapshot is the marks as text.
func (f *fixture) marksSnapshot(t *testing.T) string {
	t.Helper()
	var s string
	if err := f.admin.QueryRow(context.Background(), "SELECT coalesce(string_agg(resource || '=' || token, ';' ORDER BY resource), '') FROM fencegate.marks").Scan(&s); err != nil {
		t.Fatalf("read marks: %v", err)
	}
	return s + "\n"
}

// dataSnapshot is the content of schema shop's tables as text.
func (f *fixture) dataSnapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		"SELECT coalesce(string_agg(c::text, ';' ORDER BY c::text), '') FROM shop.customers c",
		"SELECT coalesce(string_agg(o::text, ';' ORDER BY o::text), '') FROM shop.orders o",
		"SELECT coalesce(string_agg(l::text, ';' ORDER BY l::text), '') FROM shop.lines l",
		"SELECT coalesce(string_agg(n::text, ';' ORDER BY n::text), '') FROM shop.notes n",
		"SELECT coalesce(string_agg(e::text || e.tableoid::regclass::text, ';' ORDER BY e::text), '') FROM shop.events e",
		"SELECT coalesce(string_agg(l::text || l.tableoid::regclass::text, ';' ORDER BY l::text), '') FROM shop.ledger l",
	} {
		var s string
		if err := f.admin.QueryRow(context.Background(), q).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		b.WriteString(s)
		b.WriteString("\n")
	}
	return b.String()
}

// attempt runs, as the application role, one transaction: a fence on each
// resource of fences (token 1), then stmts; it returns the first error and
// always rolls back, unless commit is set.
func attempt(ctx context.Context, conn *pgx.Conn, fences []string, stmts []string, commit bool) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, r := range fences {
		if _, err := tx.Exec(ctx, fencegate.FenceSQL, r, int64(1)); err != nil {
			return fmt.Errorf("fence %s: %w", r, err)
		}
	}
	for _, s := range stmts {
		if err := run(ctx, tx.Conn(), s); err != nil {
			return err
		}
	}
	if commit {
		return tx.Commit(ctx)
	}
	return nil
}

// run executes one statement; "COPY t (cols) FROM STDIN\nrow\nrow" sends
// the rows through the COPY protocol.
func run(ctx context.Context, conn *pgx.Conn, s string) error {
	if head, data, ok := strings.Cut(s, "\n"); ok && strings.HasPrefix(head, "COPY ") {
		_, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(data+"\n"), head)
		return err
	}
	_, err := conn.Exec(ctx, s)
	return err
}

func sqlstate(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// wantRefused fails unless err carries SQLSTATE code and its message names
// each of names.
func wantRefused(t *testing.T, err error, code string, names ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("write accepted, want SQLSTATE %s", code)
	}
	if got := sqlstate(err); got != code {
		t.Fatalf("error %v: SQLSTATE %q, want %s", err, got, code)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("error %q does not name %q", err, n)
		}
	}
}
