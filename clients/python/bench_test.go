package python_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencegatetest/clientsuite"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// BenchmarkPythonCycle runs bench/cycle.py once: the Python client's whole
// fenced critical section (acquire with a token, lock.transaction with one
// UPDATE of a protected table, release) against the unfenced one (redis-py's
// Lock, or a quorum lock on five masters, then the same UPDATE of an
// unprotected twin table), against a stack of its own: five redis-servers,
// a 3-node token cluster, and a database with both tables. It is a
// benchmark, so it runs only when asked (`make bench-python`); the script
// makes its own rounds and prints its own table:
//
//	go test -run '^$' -bench '^BenchmarkPythonCycle$' -benchtime 1x -v -timeout 30m ./clients/python/
//
// FENCEGATE_PYTHON_BENCH_ARGS passes flags to the script (default
// "--rounds 5 --seconds 3 --workers 16").
func BenchmarkPythonCycle(b *testing.B) {
	t := b
	checkPython(t)

	var redisURLs []string
	for range 5 {
		redisURLs = append(redisURLs, "redis://"+testutil.StartRedis(t).Addr())
	}
	cluster := tokenservicetest.StartCluster(t, 3)
	gate, direct := clientsuite.BenchDatabase(t)

	args := []string{"-B", "bench/cycle.py"}
	if a := os.Getenv("FENCEGATE_PYTHON_BENCH_ARGS"); a != "" {
		args = append(args, strings.Fields(a)...)
	}
	uptime(t, "before")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(),
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1",
		"FENCEGATE_BENCH_REDIS_URLS="+strings.Join(redisURLs, ","),
		"FENCEGATE_BENCH_TOKEN_SERVERS="+strings.Join(cluster.APIURLs(), ","),
		"FENCEGATE_BENCH_DSN_DIRECT="+direct,
		"FENCEGATE_BENCH_DSN_GATE="+gate,
	)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v", python, strings.Join(args, " "), err)
	}
	uptime(t, "after")
}

// uptime logs the machine's load average: a benchmark's figures mean little
// without it.
func uptime(t testing.TB, when string) {
	t.Helper()
	out, err := exec.Command("uptime").Output()
	if err != nil {
		t.Logf("uptime %s: %v", when, err)
		return
	}
	t.Logf("uptime %s: %s", when, strings.TrimSpace(string(out)))
}
