package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// setUp does what README.md has the administrator do, in the database of
// s: setup.sql as psql runs it (with -v app=ROLE -v owner=ROLE), then what
// "fencegate protect TABLE --resource EXPR" does.
func setUp(t *testing.T, s *fencegatetest.Stack, table, expr string) {
	t.Helper()
	sql, err := os.ReadFile("setup.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn := s.DB.Admin(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, strings.NewReplacer(`:"app"`, pgx.Identifier{s.DB.App}.Sanitize(), `:"owner"`, pgx.Identifier{s.DB.Owner}.Sanitize()).Replace(string(sql))); err != nil {
		t.Fatalf("setup.sql: %v", err)
	}
	if err := pgfence.Protect(ctx, conn, table, expr); err != nil {
		t.Fatal(err)
	}
}

func TestTransfers(t *testing.T) {
	addr, _ := testutil.Redis(t)
	s := fencegatetest.StartServers(t)
	setUp(t, s, "accounts", "'"+resource+"'")
	c := config{DB: s.ProxyDSN, Redis: addr, Tokens: s.Tokens.APIURLs(),
		Workers: 3, Transfers: 8, TTL: 150 * time.Millisecond, Stall: 0.25}
	res, err := run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Committed, c.Workers*c.Transfers; got != want {
		t.Errorf("%d transfers committed, want %d", got, want)
	}
	if res.Initial != 17500 || res.Total != res.Initial || !res.NoneNegative {
		t.Errorf("balances %+v: total %d (was %d, setup.sql puts 17500), none negative %v", res.Accounts, res.Total, res.Initial, res.NoneNegative)
	}
	t.Logf("%d stale attempts rejected and redone", res.Stale)
	// The table is protected: a write without the fence is refused.
	if _, err := s.DB.AppConn(t).Exec(context.Background(), "UPDATE accounts SET cents = cents + 1 WHERE name = 'dave'"); err == nil {
		t.Error("an unfenced UPDATE of accounts committed; want it refused")
	}
}
