package node_test

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

// BenchmarkNodeVsRedlock runs bench/locks.mjs once, the Node.js client against the npm
// redlock package, and its fenced cycle (straight to PostgreSQL and through
// the gate) against the unfenced cycle of npm redlock and the same UPDATE on
// an unprotected twin table, against a stack of its own: five
// redis-servers, a 3-node token cluster, and a database with protected
// tables and the twin behind the gate. It is a
// benchmark, so it runs only when asked (`make bench-node`); the script
// makes its own rounds and prints its own table:
//
//	go test -run '^$' -bench '^BenchmarkNodeVsRedlock$' -benchtime 1x -v -timeout 30m ./clients/node/
//
// FENCEGATE_NODE_BENCH_ARGS passes flags to the script (default
// "--rounds 5 --seconds 3").
func BenchmarkNodeVsRedlock(b *testing.B) {
	t := b
	checkNode(t)
	installModules(t)

	var redisURLs []string
	for range 5 {
		redisURLs = append(redisURLs, "redis://"+testutil.StartRedis(t).Addr())
	}
	cluster := tokenservicetest.StartCluster(t, 3)
	gate, direct := clientsuite.BenchDatabase(t)

	args := []string{"bench/locks.mjs"}
	if a := os.Getenv("FENCEGATE_NODE_BENCH_ARGS"); a != "" {
		args = append(args, strings.Fields(a)...)
	}
	uptime(t, "before")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Env = append(os.Environ(),
		"FENCEGATE_BENCH_REDIS_URLS="+strings.Join(redisURLs, ","),
		"FENCEGATE_BENCH_TOKEN_SERVERS="+strings.Join(cluster.APIURLs(), ","),
		"FENCEGATE_BENCH_DSN_DIRECT="+direct,
		"FENCEGATE_BENCH_DSN_GATE="+gate,
	)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v", strings.Join(args, " "), err)
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
