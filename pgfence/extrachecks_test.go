package pgfence_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5"
)

// TestPlpgsqlExtraChecks: plpgsql.extra_errors is a setting any role may
// change for its own session, and PL/pgSQL reads it when it compiles a
// function, at its first call in the session. Under 'all' (too_many_rows:
// a SELECT ... INTO that finds more than one row raises P0003;
// strict_multi_assignment; shadowed_variables) every outcome stays what it
// is by default: a fenced write commits, a stale token is FG001, and a
// statement that writes several unfenced resources is FG002 naming one of
// them, not P0003 (schema version 8's grouped checks took the first of
// several rows and said "query returned more than one row").
func TestPlpgsqlExtraChecks(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	mustExec(t, f.admin, `SELECT fencegate.set_mark('order:7', 9, 'test')`)
	// session is a new application session (so fencegate's functions are
	// compiled again) under the strictest extra checks.
	session := func(t *testing.T) *pgx.Conn {
		t.Helper()
		c := f.appConn(t)
		mustExec(t, c, `SET plpgsql.extra_errors = 'all'; SET plpgsql.extra_warnings = 'all'`)
		return c
	}
	type step struct {
		name   string
		fences []string
		stmts  []string
		code   string // "" when the transaction commits
		names  []string
	}
	steps := []step{
		{"fenced UPDATE of one resource", []string{"order:1"}, []string{"UPDATE shop.orders SET state = 'paid' WHERE id = 1"}, "", nil},
		{"fenced UPDATE of two resources", []string{"order:1", "order:2"}, []string{"UPDATE shop.orders SET state = 'paid' WHERE id IN (1, 2)"}, "", nil},
		{"fenced INSERT and DELETE", []string{"order:1", "order:2"}, []string{"INSERT INTO shop.lines VALUES (1, 2, 1), (2, 2, 1)", "DELETE FROM shop.lines WHERE n = 2"}, "", nil},
		{"fenced effect", []string{"order:1"}, []string{`SELECT fencegate.effect('order:1', 'payments', '{"amount": 1}')`}, "", nil},
		{"unfenced UPDATE of three resources", nil, []string{"UPDATE shop.orders SET state = 'x' WHERE id IN (1, 2, 3)"}, fencegate.CodeUnfenced, []string{"order:"}},
		{"UPDATE of three resources, one fenced", []string{"order:1"}, []string{"UPDATE shop.orders SET state = 'x' WHERE id IN (1, 2, 3)"}, fencegate.CodeUnfenced, []string{"order:"}},
		{"unfenced INSERT of two resources", nil, []string{"INSERT INTO shop.lines VALUES (1, 3, 1), (2, 3, 1)"}, fencegate.CodeUnfenced, []string{"order:"}},
		{"unfenced DELETE of three resources", nil, []string{"DELETE FROM shop.lines WHERE order_id IN (1, 2, 3)"}, fencegate.CodeUnfenced, []string{"order:"}},
		{"unfenced COPY of two resources", nil, []string{"COPY shop.lines (order_id, n, qty) FROM STDIN\n1\t4\t1\n2\t4\t1\n3\t4\t1"}, fencegate.CodeUnfenced, []string{"order:"}},
		{"UPDATE moving rows between resources", []string{"order:1"}, []string{"UPDATE shop.lines SET order_id = 4 WHERE order_id = 1"}, fencegate.CodeUnfenced, []string{"'order:4'"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			c := session(t)
			before := f.dataSnapshot(t)
			err := attempt(ctx, c, s.fences, s.stmts, true)
			if s.code == "" {
				if err != nil {
					t.Fatalf("under plpgsql.extra_errors = 'all': %v", err)
				}
				return
			}
			wantRefused(t, err, s.code, s.names...)
			if after := f.dataSnapshot(t); after != before {
				t.Fatalf("a refused write changed the tables:\n%s\nwas\n%s", after, before)
			}
		})
	}
	t.Run("stale tokens", func(t *testing.T) {
		c := session(t)
		_, err := c.Exec(ctx, fencegate.FenceSQL, "order:7", int64(8))
		wantRefused(t, err, fencegate.CodeStaleToken, "'order:7'")
		c = session(t)
		_, err = c.Exec(ctx, fencegate.FenceManySQL, []string{"order:5", "order:7", "order:6"}, int64(8))
		wantRefused(t, err, fencegate.CodeStaleToken, "'order:7'")
	})
	t.Run("administration", func(t *testing.T) {
		mustExec(t, f.admin, `SET plpgsql.extra_errors = 'all'`)
		defer mustExec(t, f.admin, `RESET plpgsql.extra_errors`)
		mustExec(t, f.admin, `SET ROLE `+f.data+`; CREATE TABLE shop.extra (id int PRIMARY KEY, acct int); RESET ROLE`)
		mustExec(t, f.admin, `SELECT fencegate.protect('shop.extra', $$'acct:' || acct$$)`)
		mustExec(t, f.admin, `SELECT fencegate.set_mark('acct:1', 3, 'test')`)
		mustExec(t, f.admin, `SELECT fencegate.unprotect('shop.extra')`)
		mustExec(t, f.admin, `SELECT fencegate.prune(1)`)
	})
}
