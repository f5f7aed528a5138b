package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
)

// get asks h for its answer to GET and returns the status and the body.
func get(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// withHealth checks the upstream as the role and database of dsn (empty:
// reachability only), often.
func withHealth(dsn string) proxytest.Option {
	return proxytest.WithConfig(func(c *proxy.Config) {
		c.HealthUpstream = dsn
		c.HealthInterval = 20 * time.Millisecond
	})
}

// healthSays waits until the proxy's health answers 503 with a reason
// containing want ("" waits for 200), and checks the HTTP answer.
func healthSays(t *testing.T, p *proxy.Proxy, want string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "health to say "+strconvQuote(want), func() bool {
		err := p.Ready()
		if want == "" {
			return err == nil
		}
		return err != nil && strings.Contains(err.Error(), want)
	})
	code, body := get(t, p.ReadyHandler())
	if want == "" {
		if code != http.StatusOK || body != "ok\n" {
			t.Fatalf("/readyz: %d %q, want 200 \"ok\"", code, body)
		}
		return
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, want) || strings.Count(body, "\n") != 1 {
		t.Fatalf("/readyz: %d %q, want 503 and one line with %q", code, body, want)
	}
}

func strconvQuote(s string) string {
	if s == "" {
		return "ok"
	}
	return `"` + s + `"`
}

// TestHealthHealthy: a proxy in front of a database with a sound schema is
// healthy, with the health role's login and schema check or with the
// reachability probe alone, and says so in its metrics.
func TestHealthHealthy(t *testing.T) {
	db := pgfencetest.New(t)
	for name, dsn := range map[string]string{"health role": db.AppDSN, "reachability": ""} {
		t.Run(name, func(t *testing.T) {
			_, p := proxytest.StartProxy(t, db.AppDSN, withHealth(dsn))
			healthSays(t, p, "")
			if code, body := get(t, p.LiveHandler()); code != http.StatusOK {
				t.Fatalf("/healthz: %d %q", code, body)
			}
			if v := testutilCounter(p.Metrics().UpstreamHealthy); v != 1 {
				t.Fatalf("fencegate_proxy_upstream_healthy = %v, want 1", v)
			}
		})
	}
}

// TestHealthUpstreamDown: an upstream that stops makes the proxy
// unhealthy, with or without a health role, and healthy again when it
// comes back; an upstream that never answered makes it unhealthy from the
// start. The health role here logs in with a password (SCRAM), which no
// answer shows.
func TestHealthUpstreamDown(t *testing.T) {
	pg := startPGServer(t, nil)
	app := pg.appRole(t)
	_, withRole := proxytest.StartProxy(t, app, withHealth(app))
	_, probeOnly := proxytest.StartProxy(t, app, withHealth(""))
	for _, p := range []*proxy.Proxy{withRole, probeOnly} {
		healthSays(t, p, "")
	}
	pg.Stop()
	healthSays(t, withRole, "cannot log in as the health role (user=app database=postgres)")
	healthSays(t, probeOnly, "connection refused")
	for _, p := range []*proxy.Proxy{withRole, probeOnly} {
		if v := testutilCounter(p.Metrics().UpstreamHealthy); v != 0 {
			t.Errorf("fencegate_proxy_upstream_healthy = %v, want 0", v)
		}
		if code, _ := get(t, p.LiveHandler()); code != http.StatusOK {
			t.Errorf("/healthz with the upstream down: %d, want 200", code)
		}
		if err := p.Ready(); strings.Contains(err.Error(), pg.appPassword) || strings.Contains(err.Error(), pg.password) {
			t.Fatalf("the health reason shows a password: %v", err)
		}
	}
	pg.Start()
	for _, p := range []*proxy.Proxy{withRole, probeOnly} {
		healthSays(t, p, "")
	}

	// A health role whose password is in the password file, under the
	// upstream's host and port (the string names neither).
	pass := filepath.Join(t.TempDir(), "pgpass")
	line := fmt.Sprintf("127.0.0.1:%d:postgres:app:%s\n", pg.port, pg.appPassword)
	if err := os.WriteFile(pass, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSFILE", pass)
	_, fromFile := proxytest.StartProxy(t, app, withHealth("user=app dbname=postgres"))
	healthSays(t, fromFile, "")

	_, never := proxytest.StartProxy(t, "postgres://app@"+testutil.FreeAddr(t)+"/postgres", withHealth(""))
	healthSays(t, never, "connection refused")
}

// TestHealthSchemaUnsound: a database whose fencegate schema is missing,
// or altered, makes the proxy unhealthy (the gate would refuse every one of
// its sessions), and healthy again once an administrator repairs it.
func TestHealthSchemaUnsound(t *testing.T) {
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	_, p := proxytest.StartProxy(t, db.AppDSN, withHealth(db.AppDSN))
	healthSays(t, p, "fencegate schema of database")
	healthSays(t, p, "is not sound")
	installSchema(t, db)
	healthSays(t, p, "")
	execAdmin(t, db.DSN, "GRANT INSERT ON fencegate.marks TO "+db.App)
	healthSays(t, p, "is not sound")
	installSchema(t, db)
	healthSays(t, p, "")
}

// TestHealthDraining: after Unready, /readyz answers 503 while sessions
// are still admitted; once shutdown begins, it answers 503 (draining)
// while a session still finishes its transaction, and /healthz
// answers 200 until the proxy has closed.
func TestHealthDraining(t *testing.T) {
	fx := newFixture(t, withHealth(""))
	healthSays(t, fx.p, "")
	// Unready: not ready, still serving (the command's --drain-delay).
	fx.p.Unready()
	healthSays(t, fx.p, "draining soon")
	admitted(t, fx.proxied)
	ctx := context.Background()
	c := connect(t, fx.proxied)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		done <- fx.p.Shutdown(sctx)
	}()
	healthSays(t, fx.p, "draining: the proxy is shutting down")
	if code, body := get(t, fx.p.LiveHandler()); code != http.StatusOK {
		t.Fatalf("/healthz while draining: %d %q, want 200", code, body)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the open transaction while draining: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit while draining: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	healthSays(t, fx.p, "closed")
	if code, _ := get(t, fx.p.LiveHandler()); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after shutdown: %d, want 503", code)
	}
}

// TestReadyProbeWantsPostgreSQL: without a health role, the probe passes
// only for a server that answers an SSLRequest as PostgreSQL does (N, or S
// and a handshake), not for one that hangs up or answers anything else.
func TestReadyProbeWantsPostgreSQL(t *testing.T) {
	answer := func(b []byte) func(net.Conn) {
		return func(c net.Conn) {
			defer c.Close()
			var req [8]byte
			if _, err := io.ReadFull(c, req[:]); err != nil {
				return
			}
			_, _ = c.Write(b)
			_, _ = io.Copy(io.Discard, c)
		}
	}
	for _, tc := range []struct {
		name   string
		answer []byte
		want   string
	}{
		{"N", []byte("N"), ""},
		{"hang up", nil, "does not answer as PostgreSQL: EOF"},
		{"HTTP", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), `answered an SSLRequest with 'H'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handle := answer(tc.answer)
			if tc.answer == nil {
				handle = func(c net.Conn) {
					var req [8]byte
					_, _ = io.ReadFull(c, req[:])
					c.Close()
				}
			}
			addr := testutil.Serve(t, handle)
			_, p := proxytest.StartProxy(t, "postgres://app@"+addr+"/db", withHealth(""))
			healthSays(t, p, tc.want)
		})
	}
}
