package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/proxytest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestGracefulShutdown(t *testing.T) {
	fx := newFixture(t)
	dsn, p := proxytest.StartProxy(t, fx.direct)
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
	if got, want := state(t, fx.direct, 42), "drained"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
}

func TestMetrics(t *testing.T) {
	fx := newFixture(t)
	reg := prometheus.NewRegistry()
	dsn := proxytest.Start(t, fx.direct, proxytest.WithConfig(func(c *proxy.Config) { c.Registerer = reg }))
	ctx := context.Background()
	c := connect(t, dsn)
	for _, tok := range []int64{5, 4} {
		_ = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT fencegate.fence('m', $1)", tok)
			return err
		})
	}
	_, _ = c.Exec(ctx, "UPDATE orders SET state = 'x'")
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
		"fencegate_proxy_connections_total 1",
		"fencegate_proxy_fences_accepted_total 1",
		`fencegate_proxy_rejections_total{sqlstate="FG001"} 1`,
		`fencegate_proxy_rejections_total{sqlstate="FG002"} 1`,
		"fencegate_proxy_fence_seconds_count 2",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}
