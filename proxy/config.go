package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config, as DefaultConfig returns them (DefaultHealthInterval
// is beside the health check).
const (
	// DefaultListen is the default Config.Listen.
	DefaultListen = "127.0.0.1:6432"
	// DefaultCheckInterval is the default Config.CheckInterval.
	DefaultCheckInterval = time.Second
	// DefaultRepairInterval is the default Config.RepairInterval.
	DefaultRepairInterval = 10 * time.Second
	// DefaultMaxMessageSize is the default Config.MaxMessageSize: it bounds
	// the length of one frontend message.
	DefaultMaxMessageSize = 64 << 20
	// DefaultDialTimeout is the default Config.DialTimeout.
	DefaultDialTimeout = 10 * time.Second
)

// Config configures a Proxy. Only Upstream is required: start from
// DefaultConfig, or leave a setting zero for its default (New fills it
// in), and call Validate to check a Config before New does.
type Config struct {
	// Listen is the TCP address to accept clients on. The default is
	// 127.0.0.1:6432; use "127.0.0.1:0" for a free port (see Proxy.Addr).
	Listen string
	// Upstream is the PostgreSQL server, as a URL
	// ("postgres://127.0.0.1:5432?sslmode=disable") or host:port. Only the
	// host, port and the sslmode, sslrootcert and sslservername parameters
	// are used: user, database and credentials come from each client (a
	// user or password given here is ignored, and never logged). sslmode is
	// disable, allow, prefer (the default), require, verify-ca or
	// verify-full, as in libpq.
	Upstream string
	// AdminUpstream, when set, is a connection string (URL or key=value,
	// as pgx and libpq take it) for a role allowed to install the
	// fencegate schema, on the same server as Upstream. When a session
	// finds its database's schema missing, old or altered, the proxy
	// repairs it (pgfence.Install, over a session pinned with
	// pgfence.AdminSession), connecting to the client's database in place
	// of the one the string names: it installs the schema from nothing
	// only into the database the string names, upgrades or repairs any
	// other database only when it already holds schema fencegate, and
	// never touches a template (datistemplate) or a database that takes no
	// connections. A session it does not repair for is refused with
	// SQLSTATE FG005. The default (empty) leaves the schema to the
	// administrator: a session whose database lacks a sound schema is
	// refused with SQLSTATE FG005.
	AdminUpstream string
	// SchemaOwnerRole is the NOLOGIN role that owns schema fencegate when
	// the proxy installs or repairs it (pgfence.InstallOptions.OwnerRole).
	// The default (empty) keeps the schema's current owner when nobody can
	// log in as it, else uses pgfence.DefaultOwnerRole ("fencegate_owner").
	// Used only with AdminUpstream.
	SchemaOwnerRole string
	// PruneOlderThan, when positive, has the proxy prune the marks of the
	// databases it serves every PruneInterval: it asks PruneFloor for the
	// token service's counter as it was at least PruneOlderThan ago and
	// prunes, through the admin connection (AdminUpstream, required), the
	// database that connection names (pgfence.Prune): only that one, since
	// another database the proxy serves may take its tokens from another
	// token service, whose counter is not this one's. A holder whose token
	// is older than that is then refused with FG001, as a stale one: pick
	// an age well above the longest a lock is ever held. Safety does not
	// rest on the clock: a floor too high only refuses holders. The
	// default (zero) never prunes.
	PruneOlderThan time.Duration
	// PruneInterval is how often the scheduled prune runs; the default is
	// DefaultPruneInterval (1h). The first runs one interval after Start.
	PruneInterval time.Duration
	// PruneFloor returns the token service's floor for an age, e.g.
	// (*tokenclient.Client).Floor. Required with PruneOlderThan.
	PruneFloor func(ctx context.Context, age time.Duration) (int64, error)
	// HealthUpstream, when set, is a connection string (URL or key=value)
	// naming a role, its password if it needs one, and a database that
	// the proxy logs in to every HealthInterval to check the upstream for
	// Proxy.Health: the login must work and the database's fencegate
	// schema must be sound. Its host, port and TLS settings are replaced
	// by Upstream's, so that the check takes the sessions' way. The role
	// needs no privilege (the schema check reads the catalogs); an
	// application role does. The default (empty) checks only that the
	// upstream answers as PostgreSQL does before authentication.
	HealthUpstream string
	// HealthInterval is how often the upstream is checked for
	// Proxy.Health. The default is DefaultHealthInterval (5s).
	HealthInterval time.Duration
	// CheckInterval is how long the proxy trusts a gate check that passed:
	// a session of a database whose schema was found sound less than
	// CheckInterval ago skips the schema check, and one of a role admitted
	// to that database less than CheckInterval ago skips the role check.
	// Checks that failed are never trusted. A new session's first catalog
	// queries are expensive (its caches are cold): see DESIGN.md. The
	// default is DefaultCheckInterval (1s); a negative value checks at
	// every session.
	CheckInterval time.Duration
	// RepairInterval bounds what the admin connection (AdminUpstream) does
	// for a database whose sessions find its schema unsound: it checks the
	// schema itself at most once per RepairInterval (sessions in between
	// get that verdict), and repairs it only when its own check finds a
	// problem, at most once per RepairInterval. What a client's session
	// finds never triggers a repair by itself. The default is
	// DefaultRepairInterval (10s); a negative value checks (and repairs)
	// whenever a session finds a problem.
	RepairInterval time.Duration
	// AllowPrivilegedRoles admits sessions whose role could switch
	// enforcement off (superusers, owners of protected tables or of schema
	// fencegate, members of such roles). The default (false) refuses them
	// at startup with SQLSTATE FG007.
	AllowPrivilegedRoles bool
	// AllowNewerServer admits sessions to an upstream whose PostgreSQL
	// major is newer than pgfence.MaxMajor, which fencegate has not been
	// tested on. The default (false) refuses them at startup with SQLSTATE
	// FG005, as it always refuses a major older than pgfence.MinMajor.
	AllowNewerServer bool
	// ClientTLS, when set, lets clients switch to TLS with an SSLRequest.
	// The default (nil) answers SSLRequest with 'N' (no TLS).
	ClientTLS *tls.Config
	// RequireClientTLS refuses clients that do not use TLS. The default is
	// false. It needs ClientTLS.
	RequireClientTLS bool
	// UpstreamTLS overrides the TLS configuration built from the upstream's
	// sslmode parameters. The default (nil) builds it from Upstream.
	UpstreamTLS *tls.Config
	// Logger receives structured logs: one line per refused session and
	// per fencegate error (FG001 ...) sent to a client. The default is
	// slog.Default().With("component", "proxy").
	Logger *slog.Logger
	// Registerer receives the proxy's Prometheus metrics. The default (nil)
	// registers nowhere; the metrics still work through Proxy.Metrics.
	Registerer prometheus.Registerer
	// MaxMessageSize is the largest frontend message accepted, in bytes.
	// The default is 64 MiB.
	MaxMessageSize int
	// DialTimeout bounds connecting (and TLS) to the upstream. The default
	// is DefaultDialTimeout (10s).
	DialTimeout time.Duration
	// IdleInTransactionTimeout, when positive, closes a session that has
	// been idle in a transaction (its last ReadyForQuery said 'T' or 'E'
	// and the server has answered everything since) for longer: the
	// upstream connection is closed, so PostgreSQL rolls the transaction
	// back and releases the marks it holds, and the client gets FATAL
	// 25P03. Inside a transaction it also closes, without a message, a
	// session that keeps the server waiting on its client that long: in
	// the middle of a message, after an extended batch answered with no
	// Sync, in COPY FROM STDIN with no data, or with a write to the client
	// blocked (see DESIGN.md, "Waiting on the client"). Unlike
	// PostgreSQL's idle_in_transaction_session_timeout, no session can
	// switch it off. The default (0) is off.
	IdleInTransactionTimeout time.Duration
	// ReapUpstream, with ReapAfter, runs a reaper (pgfence.Reaper) for
	// sessions that do not come through the proxy: a connection string
	// (URL or key=value) of a role that holds pg_signal_backend and nothing
	// more, and of the database to watch; its host, port and TLS mode are
	// Upstream's. Every quarter of ReapAfter it ends the sessions whose
	// transaction has held a fence for ReapAfter (only those idle that
	// long, when the role can see sessions' states). The default (empty)
	// runs none.
	ReapUpstream string
	// ReapAfter is the reaper's limit; it must be positive with
	// ReapUpstream.
	ReapAfter time.Duration
}

// DefaultConfig returns the defaults New applies to the settings left zero:
// Listen DefaultListen, HealthInterval DefaultHealthInterval, CheckInterval
// DefaultCheckInterval, MaxMessageSize DefaultMaxMessageSize and
// DialTimeout DefaultDialTimeout. Every other setting is zero, its default:
// set Upstream before New.
func DefaultConfig() Config {
	return Config{
		Listen:         DefaultListen,
		HealthInterval: DefaultHealthInterval,
		CheckInterval:  DefaultCheckInterval,
		MaxMessageSize: DefaultMaxMessageSize,
		DialTimeout:    DefaultDialTimeout,
	}
}

// setDefaults gives the settings left zero their DefaultConfig values, and
// the sizes and intervals that are negative too, except CheckInterval and
// RepairInterval (negative: check at every session).
func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.PruneInterval == 0 {
		c.PruneInterval = DefaultPruneInterval
	}
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	if c.HealthInterval <= 0 {
		c.HealthInterval = d.HealthInterval
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = d.CheckInterval
	}
	if c.RepairInterval == 0 {
		c.RepairInterval = DefaultRepairInterval
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = d.MaxMessageSize
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default().With("component", "proxy")
	}
}

// Validate reports the first thing wrong with c, as New would: an empty
// Upstream (ErrNoUpstream); an Upstream that does not parse, has an
// unknown sslmode or names an sslrootcert that cannot be read, or an
// AdminUpstream or HealthUpstream that does not parse (ErrBadUpstream);
// RequireClientTLS without ClientTLS. A setting left zero is not an error:
// New gives it its default.
func (c *Config) Validate() error {
	_, err := c.check()
	return err
}

// check is Validate, returning the parsed Upstream for New.
func (c *Config) check() (upstream, error) {
	up, err := parseUpstream(c.Upstream, c.UpstreamTLS)
	if err != nil {
		return upstream{}, err
	}
	if c.RequireClientTLS && c.ClientTLS == nil {
		return upstream{}, fmt.Errorf("proxy: RequireClientTLS needs ClientTLS (a certificate and key)")
	}
	// The health checker and the schema repairer parse their connection
	// strings when they are made, and make nothing else.
	if _, err := newHealthChecker(&Proxy{cfg: *c, up: up}); err != nil {
		return upstream{}, err
	}
	if c.AdminUpstream != "" {
		if _, err := newRepairer(c.AdminUpstream, c.SchemaOwnerRole, 0, nil, nil); err != nil {
			return upstream{}, err
		}
	}
	if c.ReapUpstream != "" {
		if c.ReapAfter <= 0 {
			return upstream{}, fmt.Errorf("proxy: the reaper (--reap-db, ReapUpstream) needs a positive --reap-after (ReapAfter), not %v: how long a transaction may hold a fence before it is ended", c.ReapAfter)
		}
		if _, err := pgx.ParseConfig(c.ReapUpstream); err != nil {
			// The parse error may quote the string, password and all.
			return upstream{}, fmt.Errorf("%w: the reaper's connection string does not parse (want postgres://user:password@/database or user=... dbname=... key=value pairs)", ErrBadUpstream)
		}
	}
	switch {
	case c.PruneOlderThan < 0:
		return upstream{}, fmt.Errorf("proxy: PruneOlderThan %v is negative", c.PruneOlderThan)
	case c.PruneOlderThan > 0 && c.AdminUpstream == "":
		return upstream{}, fmt.Errorf("proxy: PruneOlderThan needs AdminUpstream: only the schema's owner or an administrator may prune marks")
	case c.PruneOlderThan > 0 && c.PruneFloor == nil:
		return upstream{}, fmt.Errorf("proxy: PruneOlderThan needs PruneFloor: the token service says which floor is that old")
	case c.PruneInterval < 0:
		return upstream{}, fmt.Errorf("proxy: PruneInterval %v is negative", c.PruneInterval)
	}
	return up, nil
}

// upstream is the parsed Config.Upstream.
type upstream struct {
	addr     string
	sslmode  string
	tls      *tls.Config
	userInfo bool // the URL named a user or password (ignored)
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
			return upstream{}, fmt.Errorf("%w %q: want postgres://host:port?sslmode=...", ErrBadUpstream, RedactDSN(raw))
		}
		raw = RedactDSN(pu.Redacted())
		if pu.Scheme != "postgres" && pu.Scheme != "postgresql" {
			return upstream{}, fmt.Errorf("%w %q: scheme must be postgres://", ErrBadUpstream, raw)
		}
		u.userInfo = pu.User != nil || pu.Query().Has("user") || pu.Query().Has("password")
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
			return upstream{}, fmt.Errorf("%w %q: want postgres://host:port?sslmode=... or host:port", ErrBadUpstream, RedactDSN(raw))
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

// RedactDSN hides the password in a connection string, which need not
// parse: in a URL, everything between the user name and the last '@'; in
// the key=value form and in URL parameters, the value of every password.
func RedactDSN(raw string) string {
	if i, at := strings.Index(raw, "://"), strings.LastIndex(raw, "@"); i >= 0 && at > i {
		user := raw[i+3 : at]
		if c := strings.Index(user, ":"); c >= 0 {
			raw = raw[:i+3] + user[:c] + ":xxxxx" + raw[at:]
		}
	}
	return passwordKV.ReplaceAllString(raw, "${1}xxxxx")
}

// passwordKV matches a password in key=value form, quoted or not, and a
// password query parameter of a URL.
var passwordKV = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)`)

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
