package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
)

// TestGateKeepsItsSearchPathToItself: the gate's transaction sets
// search_path LOCAL, and PostgreSQL 18 reports search_path to clients in a
// ParameterStatus. Through the gate, the client's last reported value of
// every parameter is its session's own, as straight to PostgreSQL, with
// and without a search_path of the client's choosing.
func TestGateKeepsItsSearchPathToItself(t *testing.T) {
	db := pgfencetest.New(t)
	proxied := proxytest.Start(t, db.AppDSN)
	ctx := context.Background()
	for _, opts := range []string{"", "options=-c%20search_path%3Dpublic,pg_catalog"} {
		direct, gated := db.AppDSN, proxied
		if opts != "" {
			direct, gated = withParams(direct, opts), withParams(gated, opts)
		}
		dc, gc := connect(t, direct), connect(t, gated)
		for _, name := range []string{"search_path", "DateStyle", "TimeZone", "application_name", "standard_conforming_strings"} {
			want := dc.PgConn().ParameterStatus(name)
			if got := gc.PgConn().ParameterStatus(name); got != want {
				t.Errorf("options %q: the client was told %s = %q through the gate, %q straight", opts, name, got, want)
			}
		}
		var actual string
		if err := gc.QueryRow(ctx, "SHOW search_path").Scan(&actual); err != nil {
			t.Fatal(err)
		}
		if reported := gc.PgConn().ParameterStatus("search_path"); reported != "" && reported != actual {
			t.Errorf("options %q: reported search_path %q, the session's is %q", opts, reported, actual)
		}
	}
}

// TestGateIgnoresTheClientsTransactionTimeout: transaction_timeout (17) is
// the client's to set, at startup or with ALTER ROLE ... SET, and is armed
// when the gate's transaction begins. A role that set it short must not be
// refused (or cut off) because the gate's own check took longer: the gate
// disarms it for its transaction. The check is held up on a catalog lock
// for longer than the client's timeout, then admitted.
func TestGateIgnoresTheClientsTransactionTimeout(t *testing.T) {
	testutil.NeedMajor(t, 17, "transaction_timeout")
	db := pgfencetest.New(t)
	execAdmin(t, db.DSN, "ALTER ROLE "+db.App+" SET transaction_timeout = '300ms'")
	proxied := proxytest.Start(t, db.AppDSN, proxytest.WithConfig(func(c *proxy.Config) { c.CheckInterval = -1 }))
	for _, how := range []string{"ALTER ROLE", "startup options"} {
		dsn := proxied
		if how == "startup options" {
			dsn = withParams(proxied, "options=-c%20transaction_timeout%3D300ms")
		}
		lock := lockGateCatalog(t, db.DSN)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := pgx.Connect(ctx, dsn)
			if err == nil {
				var tt string
				err = c.QueryRow(ctx, "SHOW transaction_timeout").Scan(&tt)
				if err == nil && tt != "300ms" {
					err = fmt.Errorf("the session's transaction_timeout is %s, want its own 300ms", tt)
				}
				c.Close(ctx)
			}
			done <- err
		}()
		testutil.WaitFor(t, 10*time.Second, "the gate to wait for the lock", waitingOnLock(t, db.DSN, 1))
		time.Sleep(time.Second) // past the client's 300 ms
		if err := lock.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: a session whose role set transaction_timeout = 300ms, through a gate held up for 1 s: %v", how, err)
		}
	}
}
