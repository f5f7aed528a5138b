package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fenceVia takes the fence on resource with token in a transaction of
// its own through dsn, and returns the SQLSTATE it failed with ("" when
// it committed).
func fenceVia(t *testing.T, dsn, resource string, token int64) string {
	t.Helper()
	c := connect(t, dsn)
	err := pgx.BeginFunc(context.Background(), c, func(tx pgx.Tx) error {
		var got int64
		return tx.QueryRow(context.Background(), fencegate.FenceSQL, resource, token).Scan(&got)
	})
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe):
		return pe.Code
	}
	t.Fatalf("fence %s with %d: %v", resource, token, err)
	return ""
}

// With --prune-older-than the proxy prunes, through its admin connection,
// the marks of the databases its sessions use, to the floor the token
// service gives for that age: on its schedule and on PruneNow. Marks at or
// below the floor go, holders at or below it are refused (FG001), newer
// marks stay and still refuse lower tokens.
func TestProxyPrunesOnSchedule(t *testing.T) {
	db := pgfencetest.New(t)
	var logs logBuffer
	var floor atomic.Int64
	floor.Store(50)
	var asked atomic.Int64
	proxied, p := proxytest.StartProxy(t, db.AppDSN, withAdmin(db.DSN, db.Owner, &logs), proxytest.WithConfig(func(c *proxy.Config) {
		c.PruneOlderThan = time.Hour
		c.PruneInterval = time.Hour // PruneNow first, then the schedule
		c.PruneFloor = func(_ context.Context, age time.Duration) (int64, error) {
			if age != time.Hour {
				t.Errorf("PruneFloor asked for age %v, want 1h", age)
			}
			asked.Add(1)
			return floor.Load(), nil
		}
	}))
	for _, m := range []struct {
		res string
		tok int64
	}{{"order:old", 10}, {"order:edge", 50}, {"order:new", 60}} {
		if code := fenceVia(t, proxied, m.res, m.tok); code != "" {
			t.Fatalf("fence %s %d: %s", m.res, m.tok, code)
		}
	}
	// Another fenced database on the server, reached through the same
	// proxy: it may take its tokens from another token service, so the
	// proxy never prunes it.
	other := pgfencetest.New(t)
	ou, _ := url.Parse(other.AppDSN)
	pu, _ := url.Parse(proxied)
	ou.Host = pu.Host
	if code := fenceVia(t, ou.String(), "order:old", 10); code != "" {
		t.Fatalf("fence in the other database through the proxy: %s", code)
	}
	got, err := p.PruneNow(context.Background())
	if err != nil || got != 50 {
		t.Fatalf("PruneNow = %d, %v; want floor 50", got, err)
	}
	if code := fenceVia(t, ou.String(), "order:old", 10); code != "" {
		t.Fatalf("the other database, after the proxy pruned its own: %s; want its mark and floor untouched", code)
	}
	var left []string
	rows, err := connect(t, db.DSN).Query(context.Background(), "SELECT resource FROM fencegate.marks ORDER BY resource")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		left = append(left, r)
	}
	if strings.Join(left, ",") != "order:new" {
		t.Fatalf("marks left after the prune at 50: %v; want only order:new", left)
	}
	for _, c := range []struct {
		res  string
		tok  int64
		want string
	}{
		{"order:old", 20, fencegate.CodeStaleToken},  // pruned: the floor stands in
		{"order:edge", 50, fencegate.CodeStaleToken}, // at the floor
		{"order:never", 7, fencegate.CodeStaleToken}, // never fenced, below the floor
		{"order:new", 55, fencegate.CodeStaleToken},  // kept mark 60 still refuses
		{"order:old", 51, ""},
		{"order:new", 60, ""},
	} {
		if code := fenceVia(t, proxied, c.res, c.tok); code != c.want {
			t.Errorf("fence %s with %d after the prune: %q, want %q", c.res, c.tok, code, c.want)
		}
	}
	if n := testutilCounter(p.Metrics().MarksPruned); n != 2 {
		t.Errorf("marks pruned = %v, want 2", n)
	}
	if !strings.Contains(logs.String(), "marks pruned") {
		t.Errorf("no log line of the prune:\n%s", logs.String())
	}
	// A lower floor changes nothing.
	floor.Store(5)
	if _, err := p.PruneNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := fenceVia(t, proxied, "order:other", 49); code != fencegate.CodeStaleToken {
		t.Errorf("fence at 49 after a prune asked for floor 5: %q, want FG001 (the floor only rises)", code)
	}
	// The schedule: a proxy that prunes every 100 ms.
	floor.Store(60)
	proxied2, p2 := proxytest.StartProxy(t, db.AppDSN, withAdmin(db.DSN, db.Owner, nil), proxytest.WithConfig(func(c *proxy.Config) {
		c.PruneOlderThan = time.Hour
		c.PruneInterval = 100 * time.Millisecond
		c.PruneFloor = func(context.Context, time.Duration) (int64, error) { return floor.Load(), nil }
	}))
	admitted(t, proxied2)
	testutil.WaitFor(t, 10*time.Second, "a scheduled prune to floor 60", func() error {
		if code := fenceVia(t, proxied2, "order:new", 60); code != fencegate.CodeStaleToken {
			return errors.New("order:new at 60 still accepted: " + code)
		}
		return nil
	})
	// The prune commits before the proxy counts it: on a busy machine the
	// fence above can see the first before the second.
	testutil.WaitFor(t, 10*time.Second, "the scheduled prune counted", func() error {
		if n := testutilCounter(p2.Metrics().Prunes); n < 1 {
			return fmt.Errorf("scheduled prunes = %v, want at least 1", n)
		}
		return nil
	})
}

// Scheduled pruning needs the admin connection and a floor source; a
// negative age or interval is refused.
func TestPruneConfigRefused(t *testing.T) {
	floor := func(context.Context, time.Duration) (int64, error) { return 0, nil }
	for _, c := range []struct {
		name string
		cfg  proxy.Config
		want string
	}{
		{"no admin", proxy.Config{Upstream: "127.0.0.1:5432", PruneOlderThan: time.Hour, PruneFloor: floor}, "AdminUpstream"},
		{"no floor", proxy.Config{Upstream: "127.0.0.1:5432", AdminUpstream: "postgres://postgres@127.0.0.1:5432/postgres", PruneOlderThan: time.Hour}, "PruneFloor"},
		{"negative age", proxy.Config{Upstream: "127.0.0.1:5432", PruneOlderThan: -time.Hour}, "negative"},
		{"negative interval", proxy.Config{Upstream: "127.0.0.1:5432", PruneInterval: -time.Second}, "negative"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want an error naming %s", c.name, err, c.want)
		}
	}
}
