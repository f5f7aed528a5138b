package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// The setup README.md gives (setup.sql as psql runs it with -v app=ROLE -v owner=ROLE,
// then what "fencegate protect" does), and the scenario twice: the second
// run starts from the first one's balance.
func TestScenario(t *testing.T) {
	addr, _ := testutil.Redis(t)
	s := fencegatetest.StartServers(t)
	sql, err := os.ReadFile("setup.sql")
	if err != nil {
		t.Fatal(err)
	}
	conn := s.DB.Admin(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, strings.NewReplacer(`:"app"`, pgx.Identifier{s.DB.App}.Sanitize(), `:"owner"`, pgx.Identifier{s.DB.Owner}.Sanitize()).Replace(string(sql))); err != nil {
		t.Fatalf("setup.sql: %v", err)
	}
	if err := pgfence.Protect(ctx, conn, "paused_holder_accounts", "'account:' || id"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{130, 160} {
		o, err := scenario(ctx, s.ProxyDSN, addr, s.Tokens.APIURLs(), 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if o.Token2 <= o.Token1 {
			t.Errorf("run %d: tokens %d then %d; want increasing", i+1, o.Token1, o.Token2)
		}
		if !errors.Is(o.Err1, lockclient.ErrStaleToken) {
			t.Errorf("run %d: client 1's late write: %v; want ErrStaleToken", i+1, o.Err1)
		}
		if o.Balance != want || o.Before != want-30 {
			t.Errorf("run %d: balance %d then %d, want %d then %d", i+1, o.Before, o.Balance, want-30, want)
		}
	}
}
