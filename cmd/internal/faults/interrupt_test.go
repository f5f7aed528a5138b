package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
)

// TestFaultsInterruptLeavesNothing interrupts a campaign (Ctrl-C) while its
// stack runs and checks that every process it started is gone, and its
// database and roles too.
func TestFaultsInterruptLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(testutil.Binary(t), "faults", "--runs", "1", "--duration", "1m", "--report-dir", dir,
		"--postgres", testutil.PostgresAdminDSN(), "-v")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	logs := filepath.Join(dir, "run-001", "logs")
	testutil.WaitFor(t, time.Minute, "the workload clients to start", func() error {
		_, err := os.Stat(filepath.Join(logs, "client-c4.log"))
		return err
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("interrupted campaign exited 0:\n%s", out)
		}
	case <-time.After(time.Minute):
		t.Fatalf("campaign did not exit within a minute of SIGINT:\n%s", out)
	}
	db := regexp.MustCompile(`msg="created database" .*\bdb=(fg_faults_[0-9a-f]+)`).FindStringSubmatch(out.String())
	if db == nil {
		t.Fatalf("the campaign did not log its database:\n%s", out)
	}
	conn, err := pgx.Connect(context.Background(), testutil.PostgresAdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left []string
	err = conn.QueryRow(context.Background(), `SELECT coalesce(array_agg(name), '{}') FROM (
		SELECT datname::text AS name FROM pg_database WHERE datname = $1
		UNION ALL SELECT rolname::text FROM pg_roles WHERE rolname LIKE $1 || '%') x`, db[1]).Scan(&left)
	if err != nil || len(left) > 0 {
		t.Errorf("left on the server after the interrupt: %v, %v", left, err)
	}
	pids := logPids(t, logs)
	if len(pids) < 10 {
		t.Fatalf("found %d process ids in the logs, want every process of the stack", len(pids))
	}
	for _, pid := range pids {
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("process %d gone", pid), func() error {
			if err := syscall.Kill(pid, 0); err != nil {
				return nil
			}
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if err != nil || strings.Contains(string(b), ") Z ") {
				return nil
			}
			return fmt.Errorf("still running: %s", b)
		})
	}
}

// logPids reads the "=== pid N" lines the supervisor writes to each log.
func logPids(t *testing.T, dir string) []int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "=== pid "); ok {
				pid, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("%s: bad pid line %q", f, line)
				}
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
