// Package pgbouncer starts PgBouncer for this module's tests, which compare
// the proxy with it and run it in front of the proxy or behind it.
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

// Options configures Start.
type Options struct {
	// Mode is the pool mode: SessionPooling (the default) or
	// TransactionPooling.
	Mode string
	// Users are the roles clients log in as. PgBouncer runs with trust
	// authentication, which still wants each user listed.
	Users []string
	// PoolSize is the number of server connections per database and user
	// (default 4).
	PoolSize int
	// Settings are more [pgbouncer] settings, e.g. "server_login_retry":
	// "1".
	Settings map[string]string
}

// Start starts PgBouncer (from PATH) on a free 127.0.0.1 port in
// front of the server of upstreamDSN, serving every database under its
// own name, and returns upstreamDSN with its host and port replaced by
// PgBouncer's. It is stopped when the test ends; its log is shown if the
// test failed. A missing pgbouncer fails the test (scripts/services.sh
// installs it). As root, it runs as the postgres user (PgBouncer refuses
// to run as root).
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
	if o.Mode == "" {
		o.Mode = SessionPooling
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 4
	}
	dir, err := os.MkdirTemp("", "fencegate-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	listen := testutil.FreePort(t)
	var auth strings.Builder
	for _, name := range o.Users {
		fmt.Fprintf(&auth, "%q \"\"\n", name)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 100
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
`, host, port, listen, filepath.Join(dir, "users.txt"), o.Mode, o.PoolSize)
	for _, k := range slices.Sorted(maps.Keys(o.Settings)) {
		ini += k + " = " + o.Settings[k] + "\n"
	}
	files := map[string]string{"users.txt": auth.String(), "pgbouncer.ini": ini}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		pu, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgbouncer refuses to run as root and there is no postgres user to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(pu.Uid)
		gid, _ := strconv.Atoi(pu.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g, err := proc.New("", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Start("pgbouncer", bin, []string{filepath.Join(dir, "pgbouncer.ini")},
		proc.WithSetup(func(cmd *exec.Cmd) error { cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}; return nil }))
	if err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("pgbouncer (%s mode) log:\n%s", o.Mode, p.LogTail(1<<20))
		}
		_ = g.Close()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(listen))
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
