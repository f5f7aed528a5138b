package proxy_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func clientTLS(ca *testCA, require bool) proxytest.Option {
	return proxytest.WithConfig(func(c *proxy.Config) {
		c.ClientTLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf}}
		c.RequireClientTLS = require
	})
}

func withParams(dsn, params string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + params
	}
	return dsn + "?" + params
}

func TestClientTLS(t *testing.T) {
	ca := newTestCA(t, t.TempDir())
	fx := newFixture(t)
	dsn := proxytest.Start(t, fx.direct, clientTLS(ca, true))
	base := strings.Replace(dsn, "?sslmode=disable", "", 1)
	ctx := context.Background()
	for _, params := range []string{"sslmode=require", "sslmode=verify-full&sslrootcert=" + ca.caFile} {
		c, err := pgx.Connect(ctx, withParams(base, params))
		if err != nil {
			t.Fatalf("connect with %s: %v", params, err)
		}
		if _, ok := c.PgConn().Conn().(*tls.Conn); !ok {
			t.Fatalf("%s: connection is not TLS", params)
		}
		if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:42', 1)"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'tls' WHERE id = 42")
			return err
		}); err != nil {
			t.Fatalf("fenced write over TLS: %v", err)
		}
		c.Close(ctx)
	}
	out, err := exec.Command("psql", "-X", "-v", "ON_ERROR_STOP=1", "-tA", withParams(base, "sslmode=verify-full&sslrootcert="+ca.caFile), "-c", "SELECT state FROM orders WHERE id = 42").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "tls" {
		t.Fatalf("psql verify-full: %v\n%s", err, out)
	}
	if _, err := pgconn.Connect(ctx, withParams(base, "sslmode=disable")); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("plaintext client with TLS required: %v, want a TLS error", err)
	}
}

// TestClientTLSRejectsPipelinedPlaintext sends a StartupMessage right
// behind an SSLRequest, in one write (CVE-2021-3935 class). The proxy must
// not treat those plaintext bytes as coming from the TLS session.
func TestClientTLSRejectsPipelinedPlaintext(t *testing.T) {
	ca := newTestCA(t, t.TempDir())
	fx := newFixture(t)
	dsn := proxytest.Start(t, fx.direct, clientTLS(ca, false))
	c := rawConn(t, dsn)
	req := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), 80877103)
	if _, err := c.Write(append(req, startupBytes(t, dsn)...)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'S' {
		t.Fatalf("SSLRequest answer %q, %v", b[0], err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, _ := io.ReadAll(c)
	if strings.Contains(string(rest), "Z\x00\x00\x00\x05") {
		t.Fatalf("the proxy ran a session from plaintext sent before the TLS handshake")
	}
}

// TestScramTLSAndRestart runs a throwaway PostgreSQL with SCRAM-SHA-256
// and TLS: SCRAM passes through the proxy over TLS to the upstream, for an
// application role with a password; a wrong password fails cleanly; the
// gate refuses the server's superuser after it authenticated; and an
// upstream restart gives a clean error.
func TestScramTLSAndRestart(t *testing.T) {
	ca := newTestCA(t, t.TempDir())
	pg := startPGServer(t, ca)
	ctx := context.Background()
	appDSN := pg.appRole(t)
	// Proxy to upstream over TLS, verified against the CA; client in plaintext.
	dsn := proxytest.Start(t, appDSN, proxytest.WithConfig(func(c *proxy.Config) {
		c.Upstream = strings.Replace(c.Upstream, "sslmode=disable", "sslmode=verify-full&sslrootcert="+ca.caFile, 1)
	}))
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("SCRAM through the proxy, TLS upstream: %v", err)
	}
	var ssl bool
	if err := c.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("upstream leg ssl = %v, %v; want true", ssl, err)
	}
	bad := strings.Replace(dsn, pg.appPassword, "wrong", 1)
	if _, err := pgx.Connect(ctx, bad); sqlstate(err) != "28P01" {
		t.Fatalf("wrong password: %v, want SQLSTATE 28P01", err)
	}
	super := strings.Replace(dsn, strings.SplitN(strings.TrimPrefix(appDSN, "postgres://"), "@", 2)[0], "postgres:"+pg.password, 1)
	if _, err := pgx.Connect(ctx, super); sqlstate(err) != fencegate.CodePrivilegedRole {
		t.Fatalf("superuser with the right password: %v, want SQLSTATE %s", err, fencegate.CodePrivilegedRole)
	}
	// TLS client to proxy, plaintext upstream: channel binding is not
	// offered by the upstream, so clients with channel_binding=prefer use
	// plain SCRAM-SHA-256.
	tdsn := proxytest.Start(t, appDSN, clientTLS(ca, true))
	tdsn = strings.Replace(tdsn, "sslmode=disable", "sslmode=verify-full&sslrootcert="+ca.caFile, 1)
	tc, err := pgx.Connect(ctx, tdsn)
	if err != nil {
		t.Fatalf("SCRAM through a TLS-terminating proxy: %v", err)
	}
	out, err := exec.Command("psql", "-X", "-tA", tdsn, "-c", "SELECT 1").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("psql SCRAM over TLS to the proxy: %v\n%s", err, out)
	}
	// TLS on both legs: channel binding cannot pass a TLS-terminating
	// proxy; clients connect with channel_binding=disable.
	bdsn := proxytest.Start(t, appDSN, clientTLS(ca, true), proxytest.WithConfig(func(c *proxy.Config) {
		c.Upstream = strings.Replace(c.Upstream, "sslmode=disable", "sslmode=require", 1)
	}))
	bdsn = strings.Replace(bdsn, "sslmode=disable", "sslmode=require&channel_binding=disable", 1)
	bc, err := pgx.Connect(ctx, bdsn)
	if err != nil {
		t.Fatalf("SCRAM, TLS on both legs, channel_binding=disable: %v", err)
	}
	bc.Close(ctx)

	// Upstream restart: the open sessions get a clean error, not a hang.
	pg.Stop()
	for _, conn := range []*pgx.Conn{c, tc} {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := conn.Exec(qctx, "SELECT 1")
		timedOut := qctx.Err() != nil
		cancel()
		if err == nil || timedOut {
			t.Fatalf("query with the upstream down: %v (timed out: %v)", err, timedOut)
		}
		t.Logf("with the upstream down: %v", err)
	}
	pg.Start()
	c2, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect after the upstream restarted: %v", err)
	}
	c2.Close(ctx)
}
