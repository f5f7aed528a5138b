package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultListen is the address the proxy listens on when Config.Listen is empty.
const DefaultListen = "127.0.0.1:6432"

// DefaultMaxMessageSize bounds the length of one frontend message.
const DefaultMaxMessageSize = 64 << 20

// Config configures a Proxy. Only Upstream is required.
type Config struct {
	// Listen is the TCP address to accept clients on. The default is
	// 127.0.0.1:6432; use "127.0.0.1:0" for a free port (see Proxy.Addr).
	Listen string
	// Upstream is the PostgreSQL server, as a URL
	// ("postgres://127.0.0.1:5432?sslmode=disable") or host:port. Only the
	// host, port and the sslmode, sslrootcert and sslservername parameters
	// are used: user, database and credentials come from each client.
	// sslmode is disable, allow, prefer (the default), require, verify-ca or
	// verify-full, as in libpq.
	Upstream string
	// ClientTLS, when set, lets clients switch to TLS with an SSLRequest.
	// The default (nil) answers SSLRequest with 'N' (no TLS).
	ClientTLS *tls.Config
	// RequireClientTLS refuses clients that do not use TLS. The default is
	// false. It needs ClientTLS.
	RequireClientTLS bool
	// UpstreamTLS overrides the TLS configuration built from the upstream's
	// sslmode parameters. The default (nil) builds it from Upstream.
	UpstreamTLS *tls.Config
	// AllowUnfencedWrites lets transactions that took no fence write. The
	// default (false) rejects their writes with SQLSTATE FG002.
	AllowUnfencedWrites bool
	// Logger receives structured logs, one line per rejection. The default
	// is slog.Default().With("component", "proxy").
	Logger *slog.Logger
	// Registerer receives the proxy's Prometheus metrics. The default (nil)
	// registers nowhere; the metrics still work through Proxy.Metrics.
	Registerer prometheus.Registerer
	// MaxMessageSize is the largest frontend message accepted, in bytes.
	// The default is 64 MiB.
	MaxMessageSize int
	// DialTimeout bounds connecting (and TLS) to the upstream. The default
	// is 10s.
	DialTimeout time.Duration
}

// upstream is the parsed Config.Upstream.
type upstream struct {
	addr    string
	sslmode string
	tls     *tls.Config
}

func parseUpstream(raw string, override *tls.Config) (upstream, error) {
	if raw == "" {
		return upstream{}, ErrNoUpstream
	}
	u := upstream{sslmode: "prefer"}
	var q url.Values
	if strings.Contains(raw, "://") {
		pu, err := url.Parse(raw)
		if err != nil {
			return upstream{}, fmt.Errorf("%w %q: %v", ErrBadUpstream, raw, err)
		}
		if pu.Scheme != "postgres" && pu.Scheme != "postgresql" {
			return upstream{}, fmt.Errorf("%w %q: scheme must be postgres://", ErrBadUpstream, raw)
		}
		host, port := pu.Hostname(), pu.Port()
		if host == "" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = "5432"
		}
		u.addr = net.JoinHostPort(host, port)
		q = pu.Query()
	} else {
		if _, _, err := net.SplitHostPort(raw); err != nil {
			return upstream{}, fmt.Errorf("%w %q: want postgres://host:port?sslmode=... or host:port", ErrBadUpstream, raw)
		}
		u.addr = raw
	}
	if m := q.Get("sslmode"); m != "" {
		u.sslmode = m
	}
	switch u.sslmode {
	case "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
	default:
		return upstream{}, fmt.Errorf("%w %q: unknown sslmode %q", ErrBadUpstream, raw, u.sslmode)
	}
	if u.sslmode == "disable" {
		return u, nil
	}
	if override != nil {
		u.tls = override
		return u, nil
	}
	host, _, _ := net.SplitHostPort(u.addr)
	tc := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if sn := q.Get("sslservername"); sn != "" {
		tc.ServerName = sn
	}
	if f := q.Get("sslrootcert"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return upstream{}, fmt.Errorf("%w %q: read sslrootcert: %v", ErrBadUpstream, raw, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return upstream{}, fmt.Errorf("%w %q: no certificates in sslrootcert %s", ErrBadUpstream, raw, f)
		}
		tc.RootCAs = pool
	}
	switch u.sslmode {
	case "allow", "prefer", "require":
		tc.InsecureSkipVerify = true
	case "verify-ca":
		// Verify the chain but not the host name, as libpq does.
		tc.InsecureSkipVerify = true
		roots := tc.RootCAs
		tc.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, roots)
		}
	}
	u.tls = tc
	return u, nil
}

func verifyChain(raw [][]byte, roots *x509.CertPool) error {
	if len(raw) == 0 {
		return fmt.Errorf("proxy: upstream sent no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("parse upstream certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}
