package pgfence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// protectSQL creates schema t with tables of many column types, owned by a
// NOLOGIN role, plus objects an expression must not reach.
const protectSQL = `
CREATE SCHEMA t;
CREATE TYPE t.color AS ENUM ('red', 'blue');
CREATE DOMAIN t.code AS text;
CREATE COLLATION t.mine (provider = libc, locale = 'C');
CREATE FUNCTION t.twice(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 2';
CREATE FUNCTION t.same(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT $1 = $2';
CREATE OPERATOR t.=== (LEFTARG = text, RIGHTARG = text, FUNCTION = t.same);
CREATE TABLE t.wide (id int PRIMARY KEY, name text, big bigint, num numeric, f float8, r real, b bytea, ts timestamptz,
	d date, iv interval, c t.color, code t.code, u uuid, doc jsonb, flag boolean, ip inet);
INSERT INTO t.wide VALUES (1, 'Ann', 10000000000, 1.5, 0.1, 0.1, '\x01', '2024-01-02 03:04:05+00', '2024-01-02', '1 day',
	'red', 'X1', '00000000-0000-0000-0000-000000000001', '{"acct": 7}', true, '10.0.0.1');
CREATE VIEW t.v AS SELECT * FROM t.wide;
CREATE TABLE t.p (id int, k int) PARTITION BY LIST (k);
CREATE TABLE t.p1 PARTITION OF t.p FOR VALUES IN (1);
CREATE TABLE t.taken (id int, fencegate_resource text);
CREATE TEMP TABLE scratch (id int);
`

func newProtectDB(t *testing.T) (*pgfencetest.DB, *pgx.Conn) {
	t.Helper()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	if _, err := admin.Exec(context.Background(), protectSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("setup: %v", err)
	}
	return db, admin
}

// shapeOf describes what fencegate installed on a table: its resource
// column's expression and its fencegate triggers.
func shapeOf(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `SELECT coalesce((SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attname = 'fencegate_resource' AND NOT a.attisdropped), '-') || ' ' ||
		coalesce((SELECT string_agg(tgname::text || ':' || tgenabled::text, ',' ORDER BY tgname) FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname LIKE 'fencegate%'), '-')`, table).Scan(&s)
	if err != nil {
		t.Fatalf("shape of %s: %v", table, err)
	}
	return s
}

func TestProtectRefuses(t *testing.T) {
	ctx := context.Background()
	_, admin := newProtectDB(t)
	for _, c := range []struct {
		name, table, expr string
		want              string // in the error
	}{
		{"syntax error", "t.wide", "'w:' ||", "syntax error"},
		{"missing column", "t.wide", "'w:' || nope", `column "nope" does not exist`},
		{"empty expression", "t.wide", "  ", "needs a resource expression"},
		{"volatile function", "t.wide", "random()::text", "not immutable"},
		{"stable function", "t.wide", "now()::text", "not immutable"},
		{"timestamp text depends on TimeZone and DateStyle", "t.wide", "'w:' || ts", "not immutable"},
		{"date text depends on DateStyle", "t.wide", "d::text", "not immutable"},
		// 15 and later refuse it themselves; 14 takes it for immutable.
		{"interval text depends on IntervalStyle", "t.wide", "iv::text", "not immutable|IntervalStyle"},
		{"interval in a concatenation", "t.wide", "'w:' || iv", "not immutable|IntervalStyle"},
		{"float text depends on extra_float_digits", "t.wide", "'w:' || f", "double precision"},
		{"real text depends on extra_float_digits", "t.wide", "'w:' || r", "real"},
		{"a float in the middle", "t.wide", "'w:' || (id::float8 * 2)", "double precision"},
		{"a float through CASE", "t.wide", "(CASE WHEN id > 0 THEN f ELSE r END)::text", "double precision"},
		{"a float array", "t.wide", "ARRAY[f]::text", "not immutable"},
		{"an output function", "t.wide", "float8out(f)::text", "float8out"},
		{"bytea text depends on bytea_output", "t.wide", "'w:' || b", "bytea"},
		{"an enum owned by a role", "t.wide", "'w:' || c", "not immutable"},
		{"a domain owned by a role", "t.wide", "code::text", "not built in"},
		{"a function outside pg_catalog", "t.wide", "'w:' || t.twice(id)", "t.twice"},
		{"an operator outside pg_catalog", "t.wide", "CASE WHEN name OPERATOR(t.===) 'Ann' THEN 'a' ELSE 'b' END", "t.same"},
		{"a collation outside pg_catalog", "t.wide", "lower(name COLLATE t.mine)", "mine"},
		{"a system column", "t.wide", "'w:' || tableoid::text", "system column"},
		{"a view", "t.v", "'w:' || id", "is a view"},
		{"a missing table", "t.nope", "'w:' || id", `relation "t.nope" does not exist`},
		{"a table in another database", "otherdb.t.wide", "'w:' || id", "cross-database references are not implemented"},
		{"a temporary table", "scratch", "'s:' || id", "temporary table"},
		{"a partition of a table", "t.p1", "'p:' || id", "protect the topmost table"},
		{"a column named fencegate_resource", "t.taken", "'x:' || id", "did not create"},
		{"a fencegate table", "fencegate.marks", "resource", "cannot be protected"},
	} {
		t.Run(c.name, func(t *testing.T) {
			table := c.table
			before := ""
			if !strings.Contains(table, "nope") && !strings.HasPrefix(table, "otherdb") {
				before = shapeOf(t, admin, table)
			}
			err := pgfence.Protect(ctx, admin, table, c.expr)
			if !errors.Is(err, pgfence.ErrBadInput) {
				t.Fatalf("Protect(%s, %q) = %v, want ErrBadInput", table, c.expr, err)
			}
			if !containsAny(err.Error(), strings.Split(c.want, "|")) {
				t.Fatalf("Protect(%s, %q) = %v, want it to say %q", table, c.expr, err, c.want)
			}
			if before != "" {
				if after := shapeOf(t, admin, table); after != before {
					t.Fatalf("a refused protect changed %s: %s -> %s", table, before, after)
				}
			}
		})
	}
}

func TestProtectAccepts(t *testing.T) {
	ctx := context.Background()
	_, admin := newProtectDB(t)
	for _, c := range []struct{ expr, want string }{
		{"'w:' || id", "w:1"},
		{"id", "1"},
		{"'ledger'", "ledger"},
		{"'w:' || big", "w:10000000000"},
		{"'w:' || num", "w:1.5"},
		{"'w:' || f::numeric", "w:0.1"},
		{"'w:' || encode(b, 'hex')", "w:01"},
		{"'w:' || lower(name)", "w:ann"},
		{"'w:' || c::text", ""}, // refused: the enum is owned by a role
		{"'acct:' || (doc->>'acct')", "acct:7"},
		{"'w:' || u", "w:00000000-0000-0000-0000-000000000001"},
		{"'w:' || flag || ':' || host(ip)", "w:true:10.0.0.1"},
		{"CASE WHEN f > 0.05 THEN 'big' ELSE 'small' END", "big"},
		{"'w:' || (extract(hour from ts::timestamp))::int", ""}, // refused by PostgreSQL: timestamptz to timestamp depends on TimeZone
		{"'w:' || (d - date '2000-01-01')", "w:8767"},
		{"format('w:%s', id)", ""}, // refused by PostgreSQL: format is stable
	} {
		err := pgfence.Protect(ctx, admin, "t.wide", c.expr)
		if c.want == "" {
			if err == nil {
				t.Fatalf("Protect(%q) accepted", c.expr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Protect(%q): %v", c.expr, err)
		}
		var got string
		if err := admin.QueryRow(ctx, "SELECT fencegate_resource FROM t.wide WHERE id = 1").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Fatalf("Protect(%q): resource %q, want %q", c.expr, got, c.want)
		}
	}
}

// TestProtectAgain: a second protect replaces the expression in one
// transaction; one that fails leaves the first in place; the same
// expression again rewrites nothing.
func TestProtectAgain(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if err := pgfence.Protect(ctx, f.admin, "shop.orders", "'o:' || id"); err != nil {
		t.Fatal(err)
	}
	err := attempt(ctx, f.app, []string{"order:1"}, []string{"UPDATE shop.orders SET state = 'x' WHERE id = 1"}, false)
	wantRefused(t, err, fencegate.CodeUnfenced, "'o:1'")
	if err := attempt(ctx, f.app, []string{"o:1"}, []string{"UPDATE shop.orders SET state = 'x' WHERE id = 1"}, false); err != nil {
		t.Fatalf("write under the new resource: %v", err)
	}
	before := shapeOf(t, f.admin, "shop.orders")
	if err := pgfence.Protect(ctx, f.admin, "shop.orders", "'o:' ||"); err == nil {
		t.Fatal("a bad expression was accepted")
	}
	if after := shapeOf(t, f.admin, "shop.orders"); after != before {
		t.Fatalf("a failed protect changed the table: %s -> %s", before, after)
	}
	var relfile1, relfile2 uint32
	if err := f.admin.QueryRow(ctx, "SELECT relfilenode FROM pg_class WHERE oid = 'shop.orders'::regclass").Scan(&relfile1); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.Protect(ctx, f.admin, "shop.orders", "'o:' || id"); err != nil {
		t.Fatal(err)
	}
	if err := f.admin.QueryRow(ctx, "SELECT relfilenode FROM pg_class WHERE oid = 'shop.orders'::regclass").Scan(&relfile2); err != nil {
		t.Fatal(err)
	}
	if relfile1 != relfile2 {
		t.Fatalf("protecting again with the same expression rewrote the table")
	}
}

// TestNullResource: a row whose resource is NULL or empty cannot be
// written (FG003, naming the table), fence or not; protect warns about them.
func TestNullResource(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	notices := noticeConn(t, f.db.DSN)
	if err := pgfence.Protect(ctx, notices.conn, "shop.orders", "nullif('order:' || id, 'order:3')"); err != nil {
		t.Fatal(err)
	}
	if !notices.saw("1 rows of shop.orders have no resource") {
		t.Fatalf("no warning about the row without a resource; notices: %q", notices.all())
	}
	for _, stmts := range [][]string{
		{"UPDATE shop.orders SET state = 'n' WHERE id = 3"},
		{"DELETE FROM shop.orders WHERE id = 3"},
	} {
		err := attempt(ctx, f.app, []string{"order:3", "order:2"}, stmts, false)
		wantRefused(t, err, fencegate.CodeMisuse, "shop.orders", "NULL")
	}
	if err := pgfence.Protect(ctx, f.admin, "shop.orders", "CASE WHEN id = 3 THEN '' ELSE 'order:' || id END"); err != nil {
		t.Fatal(err)
	}
	err := attempt(ctx, f.app, []string{"order:3"}, []string{"UPDATE shop.orders SET state = 'n' WHERE id = 3"}, false)
	wantRefused(t, err, fencegate.CodeMisuse, "shop.orders")
}

func TestProtectWarnsAboutLoginOwner(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	owner := pgfencetest.Role(t, db.DSN, "fg_login_", "LOGIN")
	n := noticeConn(t, db.DSN)
	mustExec(t, n.conn, "CREATE TABLE acct (id int); ALTER TABLE acct OWNER TO "+owner)
	if err := pgfence.Protect(ctx, n.conn, "acct", "'acct:' || id"); err != nil {
		t.Fatal(err)
	}
	if !n.saw("owned by role " + owner + ", which can log in") {
		t.Fatalf("no warning about the login owner; notices: %q", n.all())
	}
	st, err := pgfence.Inspect(ctx, n.conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], owner) {
		t.Fatalf("Inspect warnings = %q", st.Warnings)
	}
	// The owner may read the marks, so that cascades it runs are checked.
	var can bool
	if err := n.conn.QueryRow(ctx, "SELECT has_table_privilege($1, 'fencegate.marks', 'SELECT')", owner).Scan(&can); err != nil || !can {
		t.Fatalf("table owner cannot read the marks (%v)", err)
	}
}

func TestUnprotect(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if err := pgfence.Unprotect(ctx, f.admin, "shop.events_p0"); err == nil || !strings.Contains(err.Error(), "unprotect that table") {
		t.Fatalf("Unprotect of a partition: %v", err)
	}
	if err := pgfence.Unprotect(ctx, f.admin, "shop.customers"); !errors.Is(err, pgfence.ErrNotProtected) {
		t.Fatalf("Unprotect of an unprotected table: %v, want ErrNotProtected", err)
	}
	if err := pgfence.Unprotect(ctx, f.admin, "shop.events"); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"shop.events", "shop.events_p0", "shop.events_p1", "shop.events_p1a"} {
		if got := shapeOf(t, f.admin, tbl); got != "- -" {
			t.Fatalf("after unprotect, %s still has %s", tbl, got)
		}
	}
	if err := attempt(ctx, f.app, nil, []string{"INSERT INTO shop.events VALUES (9, 9, 'free')"}, true); err != nil {
		t.Fatalf("write to an unprotected table: %v", err)
	}
	st, err := pgfence.Inspect(ctx, f.admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range st.Tables {
		if strings.HasPrefix(tb.Table, "shop.events") {
			t.Fatalf("Inspect still lists %s", tb.Table)
		}
	}
	if len(st.Problems) != 0 {
		t.Fatalf("problems after unprotect: %q", st.Problems)
	}
}

// TestProtectedView lists the fixture's tables with their roots.
func TestProtectedView(t *testing.T) {
	f := newFixture(t)
	rows, err := f.admin.Query(context.Background(), "SELECT tbl::text, root::text, resource, statement_checks FROM fencegate.protected ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Tbl, Root, Resource string
		Stmt                bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"shop.events": "shop.events", "shop.events_p0": "shop.events", "shop.events_p1": "shop.events", "shop.events_p1a": "shop.events",
		"shop.events_p1b": "shop.events", "shop.ledger": "shop.ledger", "shop.ledger_2024": "shop.ledger", "shop.lines": "shop.lines",
		"shop.notes": "shop.notes", "shop.orders": "shop.orders",
	}
	if len(got) != len(want) {
		t.Fatalf("fencegate.protected = %+v", got)
	}
	for _, r := range got {
		if want[r.Tbl] != r.Root || !r.Stmt || r.Resource == "" {
			t.Fatalf("fencegate.protected row %+v", r)
		}
	}
}

// notices collects the notices and warnings PostgreSQL sends a connection.
type notices struct {
	conn *pgx.Conn
	mu   sync.Mutex
	msgs []string
}

func noticeConn(t *testing.T, dsn string) *notices {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	n := &notices{}
	cfg.OnNotice = func(_ *pgconn.PgConn, m *pgconn.Notice) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.msgs = append(n.msgs, m.Severity+": "+m.Message)
	}
	n.conn, err = pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.conn.Close(context.Background()) })
	return n
}

func (n *notices) saw(s string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

func (n *notices) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
