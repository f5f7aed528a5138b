package proxy

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testUpstream = "postgres://127.0.0.1:5432?sslmode=disable"

func TestValidateRefusesEachBadSetting(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		is   error // nil: any error with want in its text
		want string
	}{
		{"no upstream", func(c *Config) { c.Upstream = "" }, ErrNoUpstream, "no upstream configured"},
		{"upstream URL", func(c *Config) { c.Upstream = "postgres://[::1" }, ErrBadUpstream, "want postgres://host:port?sslmode="},
		{"upstream scheme", func(c *Config) { c.Upstream = "mysql://x:1" }, ErrBadUpstream, "scheme must be postgres://"},
		{"upstream host:port", func(c *Config) { c.Upstream = "host=x" }, ErrBadUpstream, "or host:port"},
		{"upstream sslmode", func(c *Config) { c.Upstream = "postgres://127.0.0.1:5432?sslmode=maybe" }, ErrBadUpstream, `unknown sslmode "maybe"`},
		{"upstream sslrootcert missing", func(c *Config) {
			c.Upstream = "postgres://127.0.0.1:5432?sslmode=verify-full&sslrootcert=" + filepath.Join(t.TempDir(), "none.pem")
		}, ErrBadUpstream, "read sslrootcert"},
		{"upstream sslrootcert not PEM", func(c *Config) {
			c.Upstream = "postgres://127.0.0.1:5432?sslmode=verify-ca&sslrootcert=" + notPEM
		}, ErrBadUpstream, "no certificates in sslrootcert"},
		{"client TLS", func(c *Config) { c.RequireClientTLS = true }, nil, "proxy: RequireClientTLS needs ClientTLS (a certificate and key)"},
		{"admin upstream", func(c *Config) { c.AdminUpstream = "host=127.0.0.1 port=x" }, ErrBadUpstream, "admin connection string does not parse"},
		{"health upstream", func(c *Config) { c.HealthUpstream = "postgres://u@127.0.0.1:notaport/x" }, ErrBadUpstream, "health connection string does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Upstream = testUpstream
			tc.set(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Validate: %v, want %v with %q", err, tc.is, tc.want)
			}
			if _, nerr := New(cfg); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New: %v, want Validate's error %v", nerr, err)
			}
		})
	}
}

func TestValidateAcceptsDefaultsAndZeroValues(t *testing.T) {
	def := DefaultConfig()
	def.Upstream = testUpstream
	withTLS := def
	withTLS.ClientTLS, withTLS.RequireClientTLS = &tls.Config{}, true
	for name, cfg := range map[string]Config{
		"DefaultConfig": def,
		"zero":          {Upstream: testUpstream},
		"client TLS":    withTLS,
		"host:port":     {Upstream: "127.0.0.1:5432"},
		"admin and health": {Upstream: testUpstream, AdminUpstream: "postgres://admin@127.0.0.1:5432/postgres",
			HealthUpstream: "user=app dbname=app"},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}
}

// New gives every setting left zero (or, but for CheckInterval, negative)
// its DefaultConfig value, and keeps the others.
func TestNewFillsDefaults(t *testing.T) {
	def := DefaultConfig()
	for name, tc := range map[string]struct{ in, want Config }{
		"zero": {Config{Upstream: testUpstream}, def},
		"negative": {Config{Upstream: testUpstream, HealthInterval: -1, CheckInterval: -1, MaxMessageSize: -1, DialTimeout: -1},
			Config{Listen: def.Listen, HealthInterval: def.HealthInterval, CheckInterval: -1,
				MaxMessageSize: def.MaxMessageSize, DialTimeout: def.DialTimeout}},
		"set": {Config{Upstream: testUpstream, Listen: "127.0.0.1:0", HealthInterval: 7, CheckInterval: 8, MaxMessageSize: 9, DialTimeout: 10},
			Config{Listen: "127.0.0.1:0", HealthInterval: 7, CheckInterval: 8, MaxMessageSize: 9, DialTimeout: 10}},
	} {
		p, err := New(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := p.cfg
		if got.Logger == nil {
			t.Errorf("%s: no default logger", name)
		}
		if got.Listen != tc.want.Listen || got.HealthInterval != tc.want.HealthInterval || got.CheckInterval != tc.want.CheckInterval ||
			got.MaxMessageSize != tc.want.MaxMessageSize || got.DialTimeout != tc.want.DialTimeout {
			t.Errorf("%s: New set Listen %q HealthInterval %v CheckInterval %v MaxMessageSize %d DialTimeout %v, want %q %v %v %d %v", name,
				got.Listen, got.HealthInterval, got.CheckInterval, got.MaxMessageSize, got.DialTimeout,
				tc.want.Listen, tc.want.HealthInterval, tc.want.CheckInterval, tc.want.MaxMessageSize, tc.want.DialTimeout)
		}
		p.Close()
	}
}
