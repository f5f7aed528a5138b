package proxy_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestGracefulShutdown(t *testing.T) {
	fx := newFixture(t)
	dsn, p := fx.proxied, fx.p
	ctx := context.Background()
	idle := connect(t, dsn)
	busy := connect(t, dsn)
	tx, err := busy.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:42', 3)"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done <- p.Shutdown(sctx)
	}()
	// New clients are refused; the idle session is closed.
	testutil.WaitFor(t, 10*time.Second, "the listener to close", func() error {
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			c.Close(ctx)
			return io.ErrUnexpectedEOF
		}
		return nil
	})
	testutil.WaitFor(t, 10*time.Second, "the idle session to close", func() error {
		if err := idle.Ping(ctx); err == nil {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
	// The open transaction finishes.
	if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'drained' WHERE id = 42"); err != nil {
		t.Fatalf("write during drain: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit during drain: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got, want := state(t, fx.admin, 42), "drained"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
}

// A session that is idle once every answer arrived is closed at once by a
// shutdown, also after the exchanges where counting Syncs against
// ReadyForQuery goes wrong (an error before a Query's Sync, libpq's extended
// COPY with its extra Sync); a session with a request in flight gets its
// answer first.
func TestDrainAfterTrickyExchanges(t *testing.T) {
	fx := newFixture(t)
	execAdmin(t, fx.admin, "CREATE TABLE t (id int, v text); GRANT SELECT, INSERT ON t TO "+fx.role)
	env := &frameEnv{t: t, admin: fx.admin}
	var idle []*wire
	for _, name := range []string{"error then Query before Sync", "libpq extended COPY FROM STDIN (extra Sync)",
		"libpq extended COPY FROM STDIN, CopyFail", "error mid-batch skips to Sync"} {
		i := slices.IndexFunc(sequences, func(s sequence) bool { return s.name == name })
		w := dialWire(t, fx.proxied)
		sequences[i].run(w, env)
		idle = append(idle, w)
	}
	busy := dialWire(t, fx.proxied)
	busy.send(&q{String: "SELECT 1"}, &q{String: "SELECT pg_sleep(0.5), 'done'"})
	busy.ready(1)
	began := time.Now()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- fx.p.Shutdown(ctx)
	}()
	for _, w := range idle {
		if f := w.next(); f.typ != 'E' || !bytes.Contains(f.body, []byte("C57P01\x00")) {
			t.Errorf("idle session after shutdown: %v, want FATAL 57P01", f)
		}
	}
	busy.ready(1)
	if last := busy.got[len(busy.got)-3]; last.typ != 'D' || !bytes.Contains(last.body, []byte("done")) {
		t.Errorf("the request in flight at shutdown: %v, want its row", busy.got[len(busy.got)-4:])
	}
	if f := busy.next(); f.typ != 'E' || !bytes.Contains(f.body, []byte("C57P01\x00")) {
		t.Errorf("busy session after its answer: %v, want FATAL 57P01", f)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	t.Logf("shutdown took %v", time.Since(began).Round(time.Millisecond))
}

func TestMetrics(t *testing.T) {
	db := pgfencetest.New(t)
	execAdmin(t, db.DSN, `CREATE TABLE orders (id int PRIMARY KEY, state text NOT NULL);
		INSERT INTO orders VALUES (42, 'new'), (43, 'new');
		CREATE SCHEMA shop; CREATE TABLE shop.lines (id int, qty int); INSERT INTO shop.lines VALUES (1, 1);
		GRANT USAGE ON SCHEMA shop TO `+db.App+`;
		GRANT SELECT, INSERT, UPDATE, DELETE ON orders, shop.lines TO `+db.App)
	protect(t, db.DSN, "orders", `'order:' || id`)
	protect(t, db.DSN, "shop.lines", `'line'`)
	reg := prometheus.NewRegistry()
	dsn, p := proxytest.StartProxy(t, db.AppDSN, proxytest.WithConfig(func(c *proxy.Config) { c.Registerer = reg }))
	ctx := context.Background()
	c := connect(t, dsn)
	fence := func(sql string, mode pgx.QueryExecMode, args ...any) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql, append([]any{mode}, args...)...)
			return err
		})
	}
	// Accepted: simple protocol, a described unnamed statement, a cached
	// prepared statement (twice: the second Execute has no RowDescription),
	// fence_many, and a Query that fences three times. Stale: one FG001.
	for _, tc := range []struct {
		sql  string
		mode pgx.QueryExecMode
		args []any
	}{
		{fencegate.FenceSQL, pgx.QueryExecModeSimpleProtocol, []any{"order:42", 5}},
		{fencegate.FenceSQL, pgx.QueryExecModeDescribeExec, []any{"order:42", 5}},
		{fencegate.FenceSQL, pgx.QueryExecModeCacheStatement, []any{"order:42", 6}},
		{fencegate.FenceSQL, pgx.QueryExecModeCacheStatement, []any{"order:42", 6}},
		{fencegate.FenceManySQL, pgx.QueryExecModeCacheStatement, []any{[]string{"order:42", "order:43"}, 7}},
		{"SELECT fencegate.fence(r, 8) FROM unnest(ARRAY['a', 'b', 'c']) r", pgx.QueryExecModeSimpleProtocol, nil},
	} {
		if err := fence(tc.sql, tc.mode, tc.args...); err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
	}
	if err := fence(fencegate.FenceSQL, pgx.QueryExecModeCacheStatement, "order:42", 4); sqlstate(err) != fencegate.CodeStaleToken {
		t.Fatalf("stale fence: %v", err)
	}
	// Not fences: a bigint column named otherwise, a fence call aliased.
	if err := fence("SELECT 1::bigint AS n", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	// Refused writes, per table: two to orders, one to shop.lines.
	for _, q := range []string{"UPDATE orders SET state = 'x' WHERE id = 42", "DELETE FROM orders WHERE id = 43", "UPDATE shop.lines SET qty = 2"} {
		if _, err := c.Exec(ctx, q); sqlstate(err) != fencegate.CodeUnfenced {
			t.Fatalf("%s: %v, want FG002", q, err)
		}
	}
	// A session the gate refuses.
	if _, err := pgx.Connect(ctx, strings.Replace(dsn, db.App+"@", "postgres@", 1)); sqlstate(err) != fencegate.CodePrivilegedRole {
		t.Fatalf("superuser through the proxy: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the refused session to end", func() bool {
		return testutilCounter(p.Metrics().Connections) == 1
	})
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"fencegate_proxy_connections 1",
		"fencegate_proxy_connections_total 2",
		"fencegate_proxy_fences_accepted_total 8",
		`fencegate_proxy_rejections_total{sqlstate="FG001",table=""} 1`,
		`fencegate_proxy_rejections_total{sqlstate="FG002",table="public.orders"} 2`,
		`fencegate_proxy_rejections_total{sqlstate="FG002",table="shop.lines"} 1`,
		`fencegate_proxy_sessions_refused_total{reason="privileged_role"} 1`,
		"fencegate_proxy_fence_seconds_count 6", // one per answer: the three-row Query once
		"fencegate_proxy_gate_seconds_count 2",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}
