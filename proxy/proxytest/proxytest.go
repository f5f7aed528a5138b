// Package proxytest starts a fencegate proxy inside a test process, for the
// tests of programs that write through it: on 127.0.0.1:0 in front of a
// PostgreSQL server, logging to the test, shut down when the test ends.
//
// It is not a stable API, as hashicorp/raft's MakeCluster is not: it
// serves this module's tests first and may change in any release.
package proxytest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy"
)

// Option adjusts the proxy configuration used by Start.
type Option func(*proxy.Config)

// AllowPrivilegedRoles lets superusers and other roles that could switch
// enforcement off through the gate. The default is to refuse them, as the
// proxy does.
func AllowPrivilegedRoles() Option {
	return func(c *proxy.Config) { c.AllowPrivilegedRoles = true }
}

// WithConfig applies f to the configuration, for settings without an
// option of their own (TLS, metrics registry, ...). Listen and Upstream are
// set by Start before f runs; f may override them.
func WithConfig(f func(*proxy.Config)) Option { return Option(f) }

// Start starts a proxy on 127.0.0.1:0 in front of the server of
// upstreamDSN (a postgres:// URL) and returns upstreamDSN with its host and
// port replaced by the proxy's, so that it connects to the same database
// and user through the proxy. The proxy logs to t and is
// shut down when the test ends. Start fails the test on error.
func Start(t testing.TB, upstreamDSN string, opts ...Option) string {
	t.Helper()
	dsn, _ := StartProxy(t, upstreamDSN, opts...)
	return dsn
}

// StartProxy is Start that also returns the proxy, for tests that look at
// its metrics or shut it down themselves.
func StartProxy(t testing.TB, upstreamDSN string, opts ...Option) (string, *proxy.Proxy) {
	t.Helper()
	testutil.NeedServices(t)
	u, err := url.Parse(upstreamDSN)
	if err != nil {
		t.Fatalf("proxytest: parse upstream DSN: %v", err)
	}
	up := url.URL{Scheme: "postgres", Host: u.Host}
	q := url.Values{}
	q.Set("sslmode", "disable")
	if m := u.Query().Get("sslmode"); m != "" {
		q.Set("sslmode", m)
	}
	up.RawQuery = q.Encode()
	cfg := proxy.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = up.String()
	cfg.Logger = testutil.Logger(t).With("component", "proxy")
	for _, o := range opts {
		o(&cfg)
	}
	p, err := proxy.New(cfg)
	if err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	out := *u
	out.Host = p.Addr()
	return out.String(), p
}
