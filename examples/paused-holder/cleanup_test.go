package main

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/devstack/devstacktest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

// The example works in a database of its own and leaves nothing behind:
// the database the -postgres DSN names gets no schema fencegate (so the
// cleanup the docs give for the dev stack, DROP ROLE fencegate_owner, is
// not blocked by it), and the run's database and roles are gone.
func TestScenarioLeavesNothing(t *testing.T) {
	addr, _ := testutil.Redis(t)
	st := devstacktest.Start(t, addr)
	db := testutil.PostgresDB(t)
	admin := pgfencetest.Connect(t, db)
	ctx := context.Background()
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := admin.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const runs = `SELECT (SELECT count(*) FROM pg_database WHERE datname LIKE 'fg\_paused\_%') + (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'fg\_paused\_%')`
	before := count(runs)
	o, err := scenario(ctx, db, devstacktest.ProxyDSN(st, db), addr, st.Tokens.URLs, 300*time.Millisecond, "")
	if err != nil {
		t.Fatal(err)
	}
	if o.Balance != 130 {
		t.Errorf("balance %d, want 130", o.Balance)
	}
	if n := count(`SELECT count(*) FROM pg_namespace WHERE nspname = 'fencegate'`); n != 0 {
		t.Errorf("schema fencegate was installed in the database the -postgres DSN names; want the run's own database")
	}
	if after := count(runs); after > before {
		t.Errorf("%d databases or roles of the run left behind", after-before)
	}
}
