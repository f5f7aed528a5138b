package lockclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// childEnv makes the test binary run as a child process of a test
// instead of running tests: the lock holder of TestPausedHolder, the clock
// reader of TestBootClockInTimeNamespace, the Redis user of
// TestNoRedisLogOnStderr.
const childEnv = "FENCEGATE_LOCKCLIENT_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "paused-holder":
		os.Exit(pausedHolder())
	case "boot-clock":
		os.Exit(bootClockChild())
	case "redis-stderr":
		os.Exit(redisStderrChild())
	}
	// go-redis's lines about lockclient's requests go to the tests' loggers
	// as Dial sends them; the others (dials of killed masters through
	// clients the tests made themselves) are expected and dropped.
	routeOnce.Do(func() { redis.SetLogger(redisLog{stderr: log.New(io.Discard, "", 0)}) })
	testutil.Main(m, "^Example")
}

// pausedHolder is the child process: it takes the lock, reports its token,
// and waits for a line on stdin (it is SIGSTOPped meanwhile). Once resumed
// it writes at once, as a process paused between its last check and its
// write would, then reports when Done closed.
func pausedHolder() int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Println("ERROR", err); return 1 }
	tokens, err := tokenclient.NewClient(strings.Split(os.Getenv("FG_TOKENS"), ","))
	if err != nil {
		return fail(err)
	}
	ttl, err := time.ParseDuration(os.Getenv("FG_TTL"))
	if err != nil {
		return fail(err)
	}
	var db *pgx.Conn
	if dsn := os.Getenv("FG_DSN"); dsn != "" {
		if db, err = pgx.Connect(ctx, dsn); err != nil {
			return fail(err)
		}
		defer db.Close(ctx)
	}
	c, err := Dial([]string{os.Getenv("FG_REDIS")}, tokens, WithKeyPrefix(os.Getenv("FG_PREFIX")),
		WithTTL(ttl), WithNodeTimeout(2*time.Second))
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, os.Getenv("FG_RESOURCE"))
	if err != nil {
		return fail(err)
	}
	fmt.Println("ACQUIRED", l.Token())
	bufio.NewScanner(os.Stdin).Scan()
	if db != nil {
		err := l.InTx(ctx, db, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO ledger (resource, holder, token) VALUES ($1, 'A', $2)", l.Resource(), l.Token())
			return err
		})
		switch {
		case errors.Is(err, ErrStaleToken):
			fmt.Println("WRITE stale")
		case err != nil:
			fmt.Println("WRITE error", err)
		default:
			fmt.Println("WRITE ok")
		}
	}
	select {
	case <-l.Done():
		fmt.Println("DONE", errors.Is(context.Cause(l.Context()), ErrLockLost))
	case <-time.After(30 * time.Second):
		fmt.Println("DONE timeout")
	}
	return 0
}

// holderProc is the child process seen from the test.
type holderProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func startHolder(t *testing.T, env ...string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"=paused-holder"), env...)
	cmd.Stderr = testWriter{t}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start holder process: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &holderProc{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
}

// expect reads the child's next line and returns its fields after word.
func (h *holderProc) expect(t *testing.T, word string) []string {
	t.Helper()
	if !h.lines.Scan() {
		t.Fatalf("holder process ended before %s: %v", word, h.lines.Err())
	}
	f := strings.Fields(h.lines.Text())
	if len(f) == 0 || f[0] != word {
		t.Fatalf("holder process said %q, want %s ...", h.lines.Text(), word)
	}
	return f[1:]
}

func (h *holderProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal holder process: %v", err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log("holder: " + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// pausedHolderScenario runs the paused holder: A (a child process) takes
// the lock, is SIGSTOPped until its key expired, B takes the lock with a
// larger token and writes (bWrites), and A is resumed. It returns the child
// for the checks of what A does next.
func pausedHolderScenario(t *testing.T, cluster *tokenservicetest.Cluster, dsn string, bWrites func(b *Lock)) *holderProc {
	t.Helper()
	tr := sharedRedis(t)
	const ttl = 500 * time.Millisecond
	h := startHolder(t, "FG_TOKENS="+strings.Join(cluster.APIURLs(), ","), "FG_REDIS="+tr.addr,
		"FG_PREFIX="+tr.prefix, "FG_TTL="+ttl.String(), "FG_RESOURCE=ledger", "FG_DSN="+dsn)
	aToken, err := strconv.ParseInt(h.expect(t, "ACQUIRED")[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	h.signal(t, syscall.SIGSTOP)
	testutil.WaitFor(t, 30*time.Second, "A's lock to expire in Redis", func() error {
		if v := tr.values(t, "ledger")[0]; v != "" {
			return fmt.Errorf("still held by %q", v)
		}
		return nil
	})
	b := mustAcquire(t, tr.client(t, cluster.Client(t), WithTTL(30*time.Second)), "ledger")
	t.Cleanup(func() { b.Release(context.Background()) })
	if b.Token() <= aToken {
		t.Fatalf("B's token %d <= paused A's token %d", b.Token(), aToken)
	}
	bWrites(b)
	if _, err := io.WriteString(h.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	h.signal(t, syscall.SIGCONT)
	return h
}
