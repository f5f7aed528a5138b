package devstack

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgdb"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// devArgs returns "fencegate dev" flags that put every address on a free port.
func devArgs(t *testing.T, dataDir, proxy string) []string {
	addrs := func() string {
		return strings.Join([]string{testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)}, ",")
	}
	addr, _ := testutil.Redis(t)
	return []string{"dev", "--data-dir", dataDir, "--postgres", testutil.PostgresAdminDSN(), "--redis", addr,
		"--proxy-listen", proxy, "--token-api", addrs(), "--token-raft", addrs()}
}

// The whole stack from the binary: it comes up, sets up a database (schema,
// protected demo tables, an application role), prints the application's
// DSN through the proxy, the fence holds there, the token nodes mint, and
// SIGINT stops it with exit status 0 and --clean removes its data.
func TestDevCommand(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	proxy := testutil.FreeAddr(t)
	admin := testutil.PostgresAdminDSN()
	// A database and roles of the test's own; the roles go before the
	// database (cleanups run in reverse).
	dbName := DatabaseOf(testutil.PostgresDB(t))
	owner, app := testutil.RandomName("fg_devowner_"), testutil.RandomName("fg_devapp_")
	t.Cleanup(func() {
		if err := pgdb.DropRoles(context.Background(), admin, []string{dbName}, app, owner); err != nil {
			t.Error(err)
		}
	})
	args := append(devArgs(t, dataDir, proxy), "--clean", "--database", dbName, "--owner-role", owner, "--app-role", app)
	cmd := exec.Command(testutil.Binary(t), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var out []string
	var psql, tokens string
	deadline := time.After(90 * time.Second)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("fencegate dev exited early:\n%s\n%s", strings.Join(out, "\n"), stderr.String())
			}
			out = append(out, l)
			if s, ok := strings.CutPrefix(strings.TrimSpace(l), "psql '"); ok {
				psql = strings.TrimSuffix(s, "'")
			}
			if _, s, ok := strings.Cut(l, "--servers "); ok {
				tokens = s
			}
			ready = strings.Contains(l, "Ctrl-C stops everything")
		case <-deadline:
			t.Fatalf("fencegate dev not ready:\n%s\n%s", strings.Join(out, "\n"), stderr.String())
		}
	}
	if !strings.Contains(psql, proxy) {
		t.Fatalf("psql line %q does not name the proxy %s", psql, proxy)
	}

	pu, err := url.Parse(psql)
	if err != nil {
		t.Fatal(err)
	}
	if _, has := pu.User.Password(); pu.User.Username() != app || has || pu.Path != "/"+dbName {
		t.Fatalf("psql line %q: want user %s without a password, database %s", psql, app, dbName)
	}
	pgpass, err := os.ReadFile(filepath.Join(dataDir, "pgpass"))
	if err != nil {
		t.Fatalf("the application role's password: %v", err)
	}
	pw := strings.TrimSpace(string(pgpass[strings.LastIndexByte(string(pgpass), ':')+1:]))
	if len(pw) < 16 || strings.Contains(strings.Join(out, "\n")+stderr.String(), pw) {
		t.Fatalf("password %q too short or printed:\n%s\n%s", pw, strings.Join(out, "\n"), stderr.String())
	}

	// Through the proxy, as the application: a fenced write to the
	// protected order, an unfenced one (FG002) and a stale one (FG001).
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, psql)
	if err != nil {
		t.Fatalf("connect through the proxy as %s: %v", app, err)
	}
	defer conn.Close(ctx)
	pay := func(tok int64) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if tok > 0 {
				if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:42', $1::bigint)", tok); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = 42")
			return err
		})
	}
	if err := pay(34); err != nil {
		t.Fatalf("fenced update with token 34: %v", err)
	}
	var pgErr *pgconn.PgError
	if err := pay(0); !errors.As(err, &pgErr) || pgErr.Code != "FG002" {
		t.Fatalf("unfenced update: %v; want SQLSTATE FG002", err)
	}
	if err := pay(33); !errors.As(err, &pgErr) || pgErr.Code != "FG001" {
		t.Fatalf("update with token 33 after 34: %v; want SQLSTATE FG001", err)
	}
	// The superuser is not let through the gate.
	su, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	su.Host, su.Path = pu.Host, "/"+dbName
	if c, err := pgx.Connect(ctx, su.String()); !errors.As(err, &pgErr) || pgErr.Code != "FG007" {
		if err == nil {
			c.Close(ctx)
		}
		t.Fatalf("superuser through the proxy: %v; want SQLSTATE FG007", err)
	}
	res := testutil.RandomName("devtest:")
	tc, err := tokenclient.NewClient(strings.Split(tokens, ","))
	if err != nil {
		t.Fatalf("token servers %q: %v", tokens, err)
	}
	defer tc.Close()
	if tok, err := tc.NextToken(ctx, res); err != nil || tok <= 0 {
		t.Fatalf("NextToken = %d, %v", tok, err)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fencegate dev after SIGINT: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("fencegate dev did not stop within 60s of SIGINT")
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("--clean left %s behind (%v)", dataDir, err)
	}
	if c, err := net.DialTimeout("tcp", proxy, time.Second); err == nil {
		c.Close()
		t.Errorf("proxy %s still accepts after stop", proxy)
	}
}

func TestDevCommandPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cmd := exec.Command(testutil.Binary(t), devArgs(t, filepath.Join(t.TempDir(), "d"), l.Addr().String())...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("fencegate dev with the proxy port taken: %v; want exit status 1\n%s", err, out)
	}
	if s := string(out); !strings.Contains(s, l.Addr().String()) || !strings.Contains(s, "--proxy-listen") {
		t.Fatalf("output does not name the port %s and --proxy-listen:\n%s", l.Addr(), s)
	}
}
