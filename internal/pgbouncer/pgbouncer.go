// Package pgbouncer starts PgBouncer: for this module's tests, which run
// it in front of the proxy or behind it (Start), and for the benchmark
// that compares the proxy with it (Launch). Both write their settings with
// Config, so the two runs are of one configuration.
package pgbouncer

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/proc"
	"github.com/fencegate/fencegate/internal/testutil"
)

// PgBouncer pool modes.
const (
	SessionPooling     = "session"
	TransactionPooling = "transaction"
)

// Config is what pgbouncer.ini and its auth file say: trust
// authentication for Users, TCP on 127.0.0.1 only, no per-connection
// logging.
type Config struct {
	ListenPort   int
	UpstreamHost string
	UpstreamPort int
	// Database is the one database served, under its own name; "" serves
	// every database under its own name.
	Database string
	// Mode is the pool mode: SessionPooling (the default) or
	// TransactionPooling.
	Mode string
	// Users are the roles clients log in as. Trust authentication still
	// wants each user listed.
	Users []string
	// PoolSize is the number of server connections per database and user
	// (default 4).
	PoolSize int
	// MaxClientConn is PgBouncer's max_client_conn (default 100).
	MaxClientConn int
	// Settings are more [pgbouncer] settings, e.g. "server_login_retry":
	// "1".
	Settings map[string]string
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = SessionPooling
	}
	if c.PoolSize <= 0 {
		c.PoolSize = 4
	}
	if c.MaxClientConn <= 0 {
		c.MaxClientConn = 100
	}
	return c
}

// INI renders pgbouncer.ini, with the auth file at authFile.
func (c Config) INI(authFile string) string {
	c = c.withDefaults()
	var b strings.Builder
	if c.Database == "" {
		fmt.Fprintf(&b, "[databases]\n* = host=%s port=%d\n\n", c.UpstreamHost, c.UpstreamPort)
	} else {
		fmt.Fprintf(&b, "[databases]\n%s = host=%s port=%d dbname=%s\n\n", c.Database, c.UpstreamHost, c.UpstreamPort, c.Database)
	}
	b.WriteString("[pgbouncer]\n")
	for _, kv := range [][2]string{
		{"listen_addr", "127.0.0.1"},
		{"listen_port", strconv.Itoa(c.ListenPort)},
		{"unix_socket_dir", ""},
		{"auth_type", "trust"},
		{"auth_file", authFile},
		{"pool_mode", c.Mode},
		{"default_pool_size", strconv.Itoa(c.PoolSize)},
		{"max_client_conn", strconv.Itoa(c.MaxClientConn)},
		{"ignore_startup_parameters", "extra_float_digits"},
		{"log_connections", "0"},
		{"log_disconnections", "0"},
	} {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	for _, k := range slices.Sorted(maps.Keys(c.Settings)) {
		fmt.Fprintf(&b, "%s = %s\n", k, c.Settings[k])
	}
	return b.String()
}

// AuthFile renders the auth file: each user with no password, in double
// quotes (a quote inside doubled, as PgBouncer reads them).
func (c Config) AuthFile() string {
	var b strings.Builder
	for _, u := range c.Users {
		fmt.Fprintf(&b, "\"%s\" \"\"\n", strings.ReplaceAll(u, `"`, `""`))
	}
	return b.String()
}

// Launch writes pgbouncer.ini and users.txt into dir (created if missing)
// and starts PgBouncer (bin) under g. It does not wait for it to answer:
// the caller's readiness check does. As root, PgBouncer runs as the
// postgres user (it refuses to run as root) and dir is handed to that user.
func Launch(g *proc.Group, bin, dir string, c Config) (*proc.Proc, error) {
	cred, err := bouncerUser()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create pgbouncer directory: %w", err)
	}
	auth, ini := filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(auth, []byte(c.AuthFile()), 0o644); err != nil {
		return nil, fmt.Errorf("write pgbouncer auth file: %w", err)
	}
	if err := os.WriteFile(ini, []byte(c.INI(auth)), 0o644); err != nil {
		return nil, fmt.Errorf("write pgbouncer.ini: %w", err)
	}
	var opts []proc.Option
	if cred != nil {
		for _, p := range []string{dir, auth, ini} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("hand %s to the pgbouncer user: %w", p, err)
			}
		}
		opts = append(opts, proc.WithSetup(func(cmd *exec.Cmd) error {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			return nil
		}))
	}
	return g.Start("pgbouncer", bin, []string{ini}, opts...)
}

// bouncerUser is the account PgBouncer runs as: nil (this process's own)
// unless this process is root, then the postgres user.
func bouncerUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer refuses to run as root and there is no postgres user to run it as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Options configures Start.
type Options struct {
	Mode     string            // Config.Mode
	Users    []string          // Config.Users
	PoolSize int               // Config.PoolSize
	Settings map[string]string // Config.Settings
}

// Start starts PgBouncer (from PATH) on a free 127.0.0.1 port in
// front of the server of upstreamDSN, serving every database under its
// own name, and returns upstreamDSN with its host and port replaced by
// PgBouncer's. It is stopped when the test ends; its log is shown if the
// test failed. A missing pgbouncer fails the test (scripts/services.sh
// installs it).
func Start(t testing.TB, upstreamDSN string, o Options) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		t.Fatalf("pgbouncer not found on PATH: install the pgbouncer package (scripts/services.sh does)")
	}
	u, err := url.Parse(upstreamDSN)
	if err != nil {
		t.Fatalf("pgbouncer: parse upstream DSN: %v", err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatalf("pgbouncer: upstream DSN %q has no host:port", u.Redacted())
	}
	upPort, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("pgbouncer: upstream DSN %q: port %q", u.Redacted(), port)
	}
	dir, err := os.MkdirTemp("", "fencegate-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := Config{ListenPort: testutil.FreePort(t), UpstreamHost: host, UpstreamPort: upPort,
		Mode: o.Mode, Users: o.Users, PoolSize: o.PoolSize, Settings: o.Settings}.withDefaults()
	g, err := proc.New("", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Launch(g, bin, dir, c)
	if err != nil {
		_ = g.Close()
		t.Fatalf("start pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("pgbouncer (%s mode) log:\n%s", c.Mode, p.LogTail(1<<20))
		}
		_ = g.Close()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ListenPort))
	var d net.Dialer
	if err := p.WaitReady(context.Background(), 10*time.Millisecond, 20*time.Second, func(ctx context.Context) error {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}); err != nil {
		t.Fatalf("pgbouncer on %s: %v", addr, err)
	}
	du := *u
	du.Host = addr
	return du.String()
}
