package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
)

// TestProxyReapsDirectHolders: with ReapUpstream (a role holding
// pg_signal_backend and nothing more) and ReapAfter, the proxy ends a
// session straight to PostgreSQL, which the gate never saw, that set
// idle_in_transaction_session_timeout = 0 and sits in a transaction
// holding a fence; the next holder fences at once.
func TestProxyReapsDirectHolders(t *testing.T) {
	fx := newFixture(t)
	reaper := pgfencetest.Role(t, fx.admin, "fg_reaper_", "LOGIN")
	execAdmin(t, fx.admin, "GRANT pg_signal_backend TO "+reaper)
	_, p := proxytest.StartProxy(t, fx.direct, proxytest.WithConfig(func(c *proxy.Config) {
		c.ReapUpstream = pgfencetest.WithUser(t, fx.direct, reaper)
		c.ReapAfter = 400 * time.Millisecond
	}))
	ctx := context.Background()
	stalled := connect(t, fx.direct)
	if _, err := stalled.Exec(ctx, "SET idle_in_transaction_session_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	tx, err := stalled.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:42", int64(80)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'stalled' WHERE id = 42"); err != nil {
		t.Fatal(err)
	}
	pid := int32(stalled.PgConn().PID())
	admin := connect(t, fx.admin)
	testutil.WaitFor(t, 30*time.Second, "the reaper to end the stalled direct holder", func() error {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return errors.New("still there")
		}
		return nil
	})
	// The backend ends when the reaper signals it; the proxy counts the
	// session when the signal call returns, which a busy machine can
	// deliver after the backend is gone.
	testutil.WaitFor(t, 10*time.Second, "the reaped session counted", func() error {
		if got := testutilCounter(p.Metrics().SessionsReaped); got != 1 {
			return fmt.Errorf("sessions reaped: %v, want 1", got)
		}
		return nil
	})
	if st := state(t, fx.admin, 42); st == "stalled" {
		t.Fatal("the stalled holder's write committed")
	}
	fencedExec(t, fx.proxied, "order:42", 81, "UPDATE orders SET state = 'next' WHERE id = 42")
}
