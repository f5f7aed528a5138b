package main

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/devstack/devstacktest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestTransfers(t *testing.T) {
	addr, _ := testutil.Redis(t)
	st := devstacktest.Start(t, addr)
	db := testutil.PostgresDB(t)
	c := config{Direct: db, DB: devstacktest.ProxyDSN(st, db), Redis: addr, Tokens: st.Tokens.URLs,
		Owner:   pgfencetest.Role(t, db, "fg_owner_", "NOLOGIN"),
		Workers: 3, Transfers: 8, TTL: 150 * time.Millisecond, Stall: 0.25}
	res, err := run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Committed, c.Workers*c.Transfers; got != want {
		t.Errorf("%d transfers committed, want %d", got, want)
	}
	if res.Total != res.Initial || !res.NoneNegative {
		t.Errorf("balances %+v: total %d (was %d), none negative %v", res.Accounts, res.Total, res.Initial, res.NoneNegative)
	}
	t.Logf("%d stale attempts rejected and redone", res.Stale)
	// The run's table and application role are gone; the schema stays.
	var left int
	if err := pgfencetest.Connect(t, db).QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM pg_tables WHERE tablename LIKE 'accounts\_%') + (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'fg\_transfer\_%')`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d tables or roles of the run left behind", left)
	}
}
