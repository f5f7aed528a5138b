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

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenservice"
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

// The whole stack from the binary: it comes up, the proxy fences, the token
// nodes mint, and SIGINT stops it with exit status 0 and --clean removes
// its data.
func TestDevCommand(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	proxy := testutil.FreeAddr(t)
	cmd := exec.Command(testutil.Binary(t), append(devArgs(t, dataDir, proxy), "--clean")...)
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

	// A fenced transaction through the proxy, and a stale one.
	ctx := context.Background()
	// A database of the test's own, through the proxy the psql line names.
	db, err := url.Parse(testutil.PostgresDB(t))
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(psql)
	if err != nil {
		t.Fatal(err)
	}
	db.Host = pu.Host
	conn, err := pgx.Connect(ctx, db.String())
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	defer conn.Close(ctx)
	res := testutil.RandomName("devtest:")
	fence := func(tok int64) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT fencegate.fence($1::text, $2::bigint)", res, tok)
			return err
		})
	}
	if err := fence(34); err != nil {
		t.Fatalf("fence 34: %v", err)
	}
	var pgErr *pgconn.PgError
	if err := fence(33); !errors.As(err, &pgErr) || pgErr.Code != "FG001" {
		t.Fatalf("fence 33 after 34: %v; want SQLSTATE FG001", err)
	}
	tc, err := tokenservice.NewClient(strings.Split(tokens, ","))
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
