package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
)

// waitingOnLock reports whether a backend of the database waits for a lock.
func waitingOnLock(t testing.TB, dsn string, n int) func() error {
	return func() error {
		c := connect(t, dsn)
		var waiting int
		err := c.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
		if err != nil {
			return err
		}
		if waiting < n {
			return fmt.Errorf("%d backends wait for a lock, want %d", waiting, n)
		}
		return nil
	}
}

func TestConcurrentFences(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	begin := func(tok int64) (pgx.Tx, chan error) {
		c := connect(t, fx.proxied)
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			var got int64
			done <- tx.QueryRow(ctx, "SELECT fencegate.fence('order:42', $1)", tok).Scan(&got)
		}()
		return tx, done
	}
	tx6, done6 := begin(6)
	if err := <-done6; err != nil {
		t.Fatalf("fence 6: %v", err)
	}
	if _, err := tx6.Exec(ctx, "UPDATE orders SET state = 'by-6' WHERE id = 42"); err != nil {
		t.Fatal(err)
	}
	tx5, done5 := begin(5)
	testutil.WaitFor(t, 10*time.Second, "tx 5 to block on the mark", waitingOnLock(t, fx.admin, 1))
	tx7, done7 := begin(7)
	testutil.WaitFor(t, 10*time.Second, "tx 7 to block on the mark", waitingOnLock(t, fx.admin, 2))
	select {
	case err := <-done5:
		t.Fatalf("tx 5 did not wait for tx 6: %v", err)
	case err := <-done7:
		t.Fatalf("tx 7 did not wait for tx 6: %v", err)
	default:
	}
	if err := tx6.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// tx 7 proceeds; tx 5 fails FG001, either at once (current token 6) or,
	// if tx 7 took the row lock first, once tx 7 ends (current token 7).
	if err := <-done7; err != nil {
		t.Fatalf("tx 7: %v", err)
	}
	var seen string
	if err := tx7.QueryRow(ctx, "SELECT state FROM orders WHERE id = 42").Scan(&seen); err != nil || seen != "by-6" {
		t.Fatalf("tx 7 sees state %q, %v; want by-6", seen, err)
	}
	if _, err := tx7.Exec(ctx, "UPDATE orders SET state = 'by-7' WHERE id = 42"); err != nil {
		t.Fatal(err)
	}
	if err := tx7.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done5; sqlstate(err) != "FG001" {
		t.Fatalf("tx 5: %v, want SQLSTATE FG001", err)
	}
	_ = tx5.Rollback(ctx)
	if got, want := state(t, fx.admin, 42), "by-7"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	if got, want := mark(t, fx.admin, "order:42"), int64(7); got != want {
		t.Fatalf("mark = %d, want %d", got, want)
	}
}

// startProxyProcess runs "fencegate proxy" in front of the server of dsn
// and returns the DSN through it.
func startProxyProcess(t *testing.T, dsn string, extra ...string) string {
	t.Helper()
	addr := testutil.FreeAddr(t)
	host := strings.SplitN(strings.TrimPrefix(dsn, "postgres://"), "/", 2)
	hostport := host[0][strings.LastIndex(host[0], "@")+1:]
	args := append([]string{"proxy", "--listen", addr, "--upstream", "postgres://" + hostport + "?sslmode=disable"}, extra...)
	cmd := exec.Command(testutil.Binary(t), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log(sc.Text())
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	proxied := strings.Replace(dsn, hostport, addr, 1)
	testutil.WaitFor(t, 20*time.Second, "fencegate proxy on "+addr, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, proxied)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
	return proxied
}

func TestTwoProxyProcesses(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a := connect(t, startProxyProcess(t, fx.direct))
	b := connect(t, startProxyProcess(t, fx.direct))
	write := func(c *pgx.Conn, tok int64, st string) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:42', $1)", tok); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = $1 WHERE id = 42", st)
			return err
		})
	}
	if err := write(a, 10, "via-a"); err != nil {
		t.Fatalf("write through the first proxy: %v", err)
	}
	if err := write(b, 9, "stale-via-b"); sqlstate(err) != "FG001" {
		t.Fatalf("stale write through the second proxy: %v, want SQLSTATE FG001", err)
	}
	if err := write(b, 11, "via-b"); err != nil {
		t.Fatalf("newer write through the second proxy: %v", err)
	}
	if got, want := state(t, fx.admin, 42), "via-b"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
}
