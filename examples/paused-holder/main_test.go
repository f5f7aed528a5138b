package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/devstack/devstacktest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestScenario(t *testing.T) {
	addr, _ := testutil.Redis(t)
	st := devstacktest.Start(t, addr)
	db := testutil.PostgresDB(t)
	owner := pgfencetest.Role(t, db, "fg_owner_", "NOLOGIN")
	o, err := scenario(context.Background(), db, devstacktest.ProxyDSN(st, db), addr, st.Tokens.URLs, 300*time.Millisecond, owner)
	if err != nil {
		t.Fatal(err)
	}
	if o.Token2 <= o.Token1 {
		t.Errorf("tokens %d then %d; want increasing", o.Token1, o.Token2)
	}
	if !errors.Is(o.Err1, lockclient.ErrStaleToken) {
		t.Errorf("client 1's late write: %v; want ErrStaleToken", o.Err1)
	}
	if got, want := o.Balance, int64(130); got != want {
		t.Errorf("balance %d, want %d", got, want)
	}
}
