package clientsuite

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// RunBench runs a client's benchmark script, argv (the interpreter first),
// once against a stack of its own: five redis-servers, a 3-node token
// cluster, and a database with the client tables and their unprotected twin
// behind the gate. The script finds them in FENCEGATE_BENCH_REDIS_URLS,
// FENCEGATE_BENCH_TOKEN_SERVERS, FENCEGATE_BENCH_DSN_DIRECT and
// FENCEGATE_BENCH_DSN_GATE, beside env; it prints its own tables to the
// test's stdout. The machine's load average is logged before and after: a
// benchmark's figures mean little without it. The script and its children
// are killed when the test ends or after 25 minutes.
func RunBench(t testing.TB, argv []string, env ...string) {
	t.Helper()
	var redisURLs []string
	for range 5 {
		redisURLs = append(redisURLs, "redis://"+testutil.StartRedis(t).Addr())
	}
	cluster := tokenservicetest.StartCluster(t, 3)
	gate, direct := benchDatabase(t)

	uptime(t, "before")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), env...),
		"FENCEGATE_BENCH_REDIS_URLS="+strings.Join(redisURLs, ","),
		"FENCEGATE_BENCH_TOKEN_SERVERS="+strings.Join(cluster.APIURLs(), ","),
		"FENCEGATE_BENCH_DSN_DIRECT="+direct,
		"FENCEGATE_BENCH_DSN_GATE="+gate,
	)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	uptime(t, "after")
}

// uptime logs the machine's load average.
func uptime(t testing.TB, when string) {
	t.Helper()
	out, err := exec.Command("uptime").Output()
	if err != nil {
		t.Logf("uptime %s: %v", when, err)
		return
	}
	t.Logf("uptime %s: %s", when, strings.TrimSpace(string(out)))
}

// plainTable is the unprotected twin of counters (same columns, no
// resource, no trigger) that benchDatabase adds: the unfenced cycle of the
// clients' benchmarks writes it, the fenced cycle writes counters.
const plainTable = "counters_plain"

// benchDatabase is Database for the clients' benchmarks: the same tables,
// plus plainTable granted to the application role like the others. It
// returns the application role's DSNs through the gate and straight to
// PostgreSQL.
func benchDatabase(t testing.TB) (app, appDirect string) {
	t.Helper()
	testutil.NeedServices(t)
	d := pgfencetest.New(t)
	createTables(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := d.Admin(t)
	for _, q := range []string{
		"CREATE TABLE " + plainTable + " (id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + plainTable + " TO " + d.App,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return proxytest.Start(t, d.AppDSN, quietProxy(t)), d.AppDSN
}
