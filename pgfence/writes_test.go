package pgfence_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
)

// writePaths is every way the application role can write a protected row
// that the tests know of. need lists the resources the statements write
// (old and new rows); setup runs first as the application role (its own
// views, rules, functions), adminSetup as the superuser.
var writePaths = []struct {
	name       string
	adminSetup string
	setup      string
	stmts      []string
	need       []string
}{
	{name: "insert values", stmts: []string{"INSERT INTO shop.orders VALUES (10, 1, 'new', 5)"}, need: []string{"order:10"}},
	{name: "insert select", stmts: []string{"INSERT INTO shop.orders SELECT g, 1, 'new', 1 FROM generate_series(11, 13) g"}, need: []string{"order:11", "order:12", "order:13"}},
	{name: "update", stmts: []string{"UPDATE shop.orders SET state = 'paid' WHERE id = 1"}, need: []string{"order:1"}},
	{name: "update moving the resource", stmts: []string{"UPDATE shop.orders SET id = 20 WHERE id = 2"}, need: []string{"order:2", "order:20"}},
	{name: "delete with cascade", stmts: []string{"DELETE FROM shop.orders WHERE id = 3"}, need: []string{"order:3"}},
	{name: "merge update and insert", stmts: []string{`MERGE INTO shop.orders o USING (VALUES (1, 'x'), (30, 'y')) v(id, s) ON o.id = v.id
		WHEN MATCHED THEN UPDATE SET state = v.s WHEN NOT MATCHED THEN INSERT VALUES (v.id, 1, v.s, 0)`}, need: []string{"order:1", "order:30"}},
	{name: "merge delete", stmts: []string{`MERGE INTO shop.orders o USING (VALUES (5)) v(id) ON o.id = v.id WHEN MATCHED THEN DELETE`}, need: []string{"order:5"}},
	{name: "copy from", stmts: []string{"COPY shop.orders (id, customer, state, amount) FROM STDIN\n40\t1\tcopied\t1\n41\t1\tcopied\t2"}, need: []string{"order:40", "order:41"}},
	{name: "insert on conflict update", stmts: []string{"INSERT INTO shop.orders VALUES (1, 1, 'z', 0) ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state"}, need: []string{"order:1"}},
	{name: "insert on conflict inserting", stmts: []string{"INSERT INTO shop.orders VALUES (50, 1, 'z', 0) ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state"}, need: []string{"order:50"}},
	{name: "writable CTE", stmts: []string{"WITH d AS (DELETE FROM shop.orders WHERE id = 5 RETURNING *) INSERT INTO shop.orders SELECT id + 100, customer, state, amount FROM d"}, need: []string{"order:5", "order:105"}},
	{name: "cascade from an unprotected table", stmts: []string{"DELETE FROM shop.customers WHERE id = 2"}, need: []string{"order:6", "order:7"}},
	{name: "set null from a protected table", stmts: []string{"DELETE FROM shop.orders WHERE id = 4"}, need: []string{"order:4", "note:1"}},
	{name: "update cascade", stmts: []string{"UPDATE shop.orders SET id = 21 WHERE id = 6"}, need: []string{"order:6", "order:21"}},
	{name: "rule on an application table",
		setup: `CREATE TABLE app.inbox (id int);
			CREATE RULE fwd AS ON INSERT TO app.inbox DO ALSO INSERT INTO shop.orders VALUES (NEW.id, 1, 'rule', 0)`,
		stmts: []string{"INSERT INTO app.inbox VALUES (60)"}, need: []string{"order:60"}},
	{name: "auto-updatable view",
		setup: "CREATE VIEW app.mine AS SELECT * FROM shop.orders WHERE customer = 1",
		stmts: []string{"UPDATE app.mine SET state = 'v' WHERE id = 1"}, need: []string{"order:1"}},
	{name: "view with INSTEAD OF trigger",
		setup: `CREATE VIEW app.iv AS SELECT id, state FROM shop.orders;
			CREATE FUNCTION app.iv_upd() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN UPDATE shop.orders SET state = NEW.state WHERE id = OLD.id; RETURN NEW; END$$;
			CREATE TRIGGER iv INSTEAD OF UPDATE ON app.iv FOR EACH ROW EXECUTE FUNCTION app.iv_upd()`,
		stmts: []string{"UPDATE app.iv SET state = 'iv' WHERE id = 1"}, need: []string{"order:1"}},
	{name: "cursor where current of",
		stmts: []string{"DECLARE c CURSOR FOR SELECT * FROM shop.orders WHERE id = 1 FOR UPDATE", "FETCH c", "UPDATE shop.orders SET state = 'cur' WHERE CURRENT OF c"},
		need:  []string{"order:1"}},
	{name: "DO block", stmts: []string{"DO $$BEGIN UPDATE shop.orders SET state = 'do' WHERE id = 1; END$$"}, need: []string{"order:1"}},
	{name: "security definer function of the application",
		setup: "CREATE FUNCTION app.pay(i int) RETURNS void LANGUAGE sql SECURITY DEFINER AS $$UPDATE shop.orders SET state = 'fn' WHERE id = i$$",
		stmts: []string{"SELECT app.pay(1)"}, need: []string{"order:1"}},
	{name: "partitioned table through the parent", stmts: []string{"INSERT INTO shop.events VALUES (3, 5, 'x')"}, need: []string{"acct:5"}},
	{name: "partition directly", stmts: []string{"INSERT INTO shop.events_p0 VALUES (4, 6, 'x')"}, need: []string{"acct:6"}},
	{name: "sub-partition directly", stmts: []string{"INSERT INTO shop.events_p1a VALUES (102, 160, 'x')"}, need: []string{"acct:160"}},
	{name: "update moving a row across partitions", stmts: []string{"UPDATE shop.events SET account = 120 WHERE id = 1"}, need: []string{"acct:5", "acct:120"}},
	{name: "delete through a sub-partitioned partition", stmts: []string{"DELETE FROM shop.events_p1 WHERE id = 100"}, need: []string{"acct:150"}},
	{name: "partition created after protect",
		adminSetup: "CREATE TABLE shop.events_p9 PARTITION OF shop.events FOR VALUES FROM (900) TO (1000); GRANT INSERT, UPDATE, DELETE, SELECT ON shop.events_p9 TO PUBLIC",
		stmts:      []string{"INSERT INTO shop.events_p9 VALUES (9, 950, 'late')"}, need: []string{"acct:950"}},
	{name: "partition attached after protect",
		adminSetup: `CREATE TABLE shop.events_p8 (LIKE shop.events INCLUDING GENERATED);
			ALTER TABLE shop.events ATTACH PARTITION shop.events_p8 FOR VALUES FROM (800) TO (900); GRANT ALL ON shop.events_p8 TO PUBLIC`,
		stmts: []string{"INSERT INTO shop.events_p8 VALUES (8, 850, 'late')"}, need: []string{"acct:850"}},
	{name: "inheritance child directly", stmts: []string{"INSERT INTO shop.ledger_2024 VALUES (3, 9, 1)"}, need: []string{"acct:9"}},
	{name: "inheritance child through the parent", stmts: []string{"UPDATE shop.ledger SET amt = amt + 1 WHERE id = 2"}, need: []string{"acct:8"}},
	{name: "delete from parent and child", stmts: []string{"DELETE FROM shop.ledger"}, need: []string{"acct:7", "acct:8"}},
}

// TestWritePaths tries every write path three ways, as the application role:
// without a fence and with a fence on another resource (refused with FG002,
// nothing changed, no mark lowered), with fences on all but one of the
// resources written (refused, naming the missing one), and with fences on
// all of them (accepted).
func TestWritePaths(t *testing.T) {
	ctx := context.Background()
	for _, wp := range writePaths {
		t.Run(wp.name, func(t *testing.T) {
			t.Parallel()
			if strings.HasPrefix(wp.name, "merge") {
				testutil.NeedMajor(t, 15, "MERGE")
			}
			f := newFixture(t)
			if wp.adminSetup != "" {
				if _, err := f.admin.Exec(ctx, wp.adminSetup); err != nil {
					t.Fatalf("admin setup: %v", err)
				}
			}
			if wp.setup != "" {
				if _, err := f.app.Exec(ctx, wp.setup); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			before := f.snapshot(t)
			check := func(what string) {
				t.Helper()
				if after := f.snapshot(t); after != before {
					t.Fatalf("%s changed the data:\nbefore:\n%s\nafter:\n%s", what, before, after)
				}
			}

			err := attempt(ctx, f.app, nil, wp.stmts, true)
			wantRefused(t, err, fencegate.CodeUnfenced)
			check("a write without a fence")

			err = attempt(ctx, f.app, []string{"order:999"}, wp.stmts, true)
			wantRefused(t, err, fencegate.CodeUnfenced)
			check("a write under a fence on another resource")

			for i, missing := range wp.need {
				fences := append(append([]string{}, wp.need[:i]...), wp.need[i+1:]...)
				err := attempt(ctx, f.app, fences, wp.stmts, true)
				wantRefused(t, err, fencegate.CodeUnfenced, "'"+missing+"'")
				check("a write missing the fence on " + missing)
			}

			data := f.dataSnapshot(t)
			if err := attempt(ctx, f.app, wp.need, wp.stmts, true); err != nil {
				t.Fatalf("fenced write refused: %v", err)
			}
			if after := f.dataSnapshot(t); after == data {
				t.Fatalf("the fenced write changed nothing")
			}
		})
	}
}
