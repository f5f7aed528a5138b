package lockclient

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// viaRelay puts a fault relay in front of the server of dsn and returns
// the relay and dsn pointing at it.
func viaRelay(t *testing.T, dsn string) (*netfault.Relay, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	r, err := netfault.NewRelay("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	u.Host = r.Addr()
	return r, u.String()
}

// hasRow reports whether the ledger holds a row of holder with token.
func hasRow(t *testing.T, direct *pgx.Conn, holder string, token int64) bool {
	t.Helper()
	var n int
	if err := direct.QueryRow(ctxT(t), "SELECT count(*) FROM ledger WHERE holder = $1 AND token = $2", holder, token).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// testCommitInFlight: the lease ends while COMMIT is on the wire (a relay
// between the client and the proxy holds COMMIT's bytes). Without InTx,
// a COMMIT sent under the lease's context fails with "context canceled"
// although the transaction committed: the bug. InTx reports the commit's
// real outcome, or ErrCommitUnknown when its own bound passes or the
// connection breaks during COMMIT; never a plain failure for a committed
// transaction. A COMMIT that PostgreSQL answered is reported as it
// answered.
func testCommitInFlight(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	direct := f.direct
	// Not protected: the test is about COMMIT's answer, not the fence.
	f.exec(t, `CREATE TABLE uniq (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)`)
	f.grant(t, "uniq")
	relay, dsn := viaRelay(t, f.proxy)
	tr := sharedRedis(t)
	const ttl, delay = time.Second, 1500 * time.Millisecond

	// acquire takes a fresh lock on its own resource, with a short lease.
	n := 0
	acquire := func(t *testing.T, opts ...Option) *Lock {
		n++
		c := tr.client(t, cluster.Client(t), append([]Option{WithTTL(ttl)}, opts...)...)
		l := mustAcquire(t, c, fmt.Sprintf("ledger-%d", n))
		t.Cleanup(func() { l.Release(context.Background()) })
		return l
	}
	// slowCommit inserts holder's row, checks the lease is still on, and
	// makes the relay hold every later chunk (COMMIT and its answer).
	slowCommit := func(t *testing.T, l *Lock, holder string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			if err := insertAs(holder, l)(tx); err != nil {
				return err
			}
			if l.left() <= 0 {
				t.Fatalf("the lease ended before COMMIT was sent (machine too slow for a %v lease)", ttl)
			}
			relay.SetDelay(delay)
			return nil
		}
	}
	t.Cleanup(func() { relay.SetDelay(0) })

	// Each subtest connects before it takes its lock: the gate's check of a
	// new session can take a good part of the short lease on a busy machine.
	t.Run("without InTx the committed transaction looks failed", func(t *testing.T) {
		db := connect(t, dsn)
		l := acquire(t)
		tx, err := db.Begin(l.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Fence(l.Context(), tx); err != nil {
			t.Fatal(err)
		}
		if err := slowCommit(t, l, "control")(tx); err != nil {
			t.Fatal(err)
		}
		err = tx.Commit(l.Context()) // what InTx did before: the lease cancels COMMIT
		relay.SetDelay(0)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Commit under the lease's context: %v, want context.Canceled", err)
		}
		testutil.Eventually(t, 30*time.Second, "the cancelled COMMIT to land", func() bool { return hasRow(t, direct, "control", l.Token()) })
		t.Logf("reproduced: COMMIT said %q and the row committed", err)
	})

	t.Run("the lease ends during COMMIT: the real outcome", func(t *testing.T) {
		db := connect(t, dsn)
		l := acquire(t, WithCommitTimeout(30*time.Second))
		err := l.InTx(l.Context(), db, slowCommit(t, l, "landed"))
		relay.SetDelay(0)
		if err != nil {
			t.Fatalf("InTx: %v, want nil: the transaction committed", err)
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("the lease is still on after InTx: the test did not end it during COMMIT")
		}
		if !hasRow(t, direct, "landed", l.Token()) {
			t.Fatal("InTx returned nil but the row is not there")
		}
	})

	t.Run("the commit timeout passes during COMMIT: unknown", func(t *testing.T) {
		db := connect(t, dsn)
		l := acquire(t, WithCommitTimeout(300*time.Millisecond))
		err := l.InTx(l.Context(), db, slowCommit(t, l, "timeout"))
		relay.SetDelay(0)
		if !errors.Is(err, ErrCommitUnknown) {
			t.Fatalf("InTx: %v, want ErrCommitUnknown", err)
		}
		t.Logf("InTx: %v", err)
		// The outcome was unknown to InTx; the row, keyed by the token,
		// tells: this COMMIT did reach PostgreSQL.
		testutil.Eventually(t, 30*time.Second, "the COMMIT to land", func() bool { return hasRow(t, direct, "timeout", l.Token()) })
	})

	t.Run("the connection breaks during COMMIT: unknown", func(t *testing.T) {
		db := connect(t, dsn)
		l := acquire(t)
		sent := make(chan struct{})
		go func() {
			<-sent
			time.Sleep(200 * time.Millisecond) // COMMIT is held in the relay for 1.5s
			relay.Reset()
		}()
		err := l.InTx(l.Context(), db, func(tx pgx.Tx) error {
			defer close(sent)
			return slowCommit(t, l, "reset")(tx)
		})
		relay.SetDelay(0)
		if !errors.Is(err, ErrCommitUnknown) {
			t.Fatalf("InTx: %v, want ErrCommitUnknown", err)
		}
		t.Logf("InTx: %v", err)
		time.Sleep(2 * delay) // let anything still held in the relay reach the server
		if hasRow(t, direct, "reset", l.Token()) {
			t.Fatal("the row committed although the relay dropped COMMIT")
		}
	})

	t.Run("COMMIT answered with an error: reported as answered", func(t *testing.T) {
		l := acquire(t)
		err := l.InTx(ctxT(t), connect(t, dsn), func(tx pgx.Tx) error {
			_, err := tx.Exec(ctxT(t), "INSERT INTO uniq VALUES (1), (1)") // checked at COMMIT
			return err
		})
		var pgErr *pgconn.PgError
		if errors.Is(err, ErrCommitUnknown) || !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Fatalf("InTx: %v, want the unique violation PostgreSQL answered to COMMIT", err)
		}
	})

	t.Run("COMMIT of a failed transaction: rolled back, not unknown", func(t *testing.T) {
		l := acquire(t)
		err := l.InTx(ctxT(t), connect(t, dsn), func(tx pgx.Tx) error {
			_, _ = tx.Exec(ctxT(t), "SELECT 1/0") // fn ignores the error
			return nil
		})
		if err == nil || errors.Is(err, ErrCommitUnknown) || !errors.Is(err, pgx.ErrTxCommitRollback) {
			t.Fatalf("InTx: %v, want ErrTxCommitRollback", err)
		}
	})
}

// countingDB counts the transactions begun.
type countingDB struct {
	Beginner
	n atomic.Int32
}

func (c *countingDB) Begin(ctx context.Context) (pgx.Tx, error) {
	c.n.Add(1)
	return c.Beginner.Begin(ctx)
}

// repeatableRead connects through the proxy with REPEATABLE READ as the
// default isolation.
func repeatableRead(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	c, err := pgx.ConnectConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// testSerializationRetry: under REPEATABLE READ a fence that waits behind a
// concurrent fence of the same resource fails with 40001 once the other
// commits. InTx runs it again, within the lease, and it succeeds; with
// retries off the error matches ErrSerialization and carries the 40001.
func testSerializationRetry(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	proxyDSN, direct := f.proxy, f.direct
	tr := sharedRedis(t)
	for _, tc := range []struct {
		name    string
		retries int
	}{{"retried", 5}, {"retries off", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tr.client(t, cluster.Client(t), WithTTL(30*time.Second), WithTxRetries(tc.retries))
			l := mustAcquire(t, c, "rr-"+strings.ReplaceAll(tc.name, " ", "-"))
			defer l.Release(context.Background())
			// A first fence creates the resource's mark, so that the two
			// below update one row.
			if err := l.InTx(ctxT(t), connect(t, proxyDSN), func(pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			first, second := repeatableRead(t, proxyDSN), &countingDB{Beginner: repeatableRead(t, proxyDSN)}
			fenced, release := make(chan struct{}), make(chan struct{})
			firstErr := make(chan error, 1)
			go func() {
				firstErr <- l.InTx(ctxT(t), first, func(tx pgx.Tx) error {
					close(fenced)
					<-release
					return insertAs("first", l)(tx)
				})
			}()
			<-fenced
			secondErr := make(chan error, 1)
			go func() { secondErr <- l.InTx(ctxT(t), second, insertAs("second", l)) }()
			// Let the second fence wait on the mark's row lock, then commit
			// the first.
			testutil.WaitFor(t, 30*time.Second, "the second fence to wait for the first", func() error {
				var waiting bool
				err := direct.QueryRow(ctxT(t), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%fencegate.fence%')`).Scan(&waiting)
				if err == nil && !waiting {
					err = errors.New("not waiting yet")
				}
				return err
			})
			close(release)
			if err := <-firstErr; err != nil {
				t.Fatalf("first InTx: %v", err)
			}
			err := <-secondErr
			t.Logf("second InTx after %d transactions: %v", second.n.Load(), err)
			if tc.retries == 0 {
				var pgErr *pgconn.PgError
				if !errors.Is(err, ErrSerialization) || !errors.As(err, &pgErr) || pgErr.Code != "40001" {
					t.Fatalf("second InTx: %v, want ErrSerialization with the 40001", err)
				}
				if got := second.n.Load(); got != 1 {
					t.Fatalf("%d transactions with retries off, want 1", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("second InTx: %v, want it retried to success", err)
			}
			if got := second.n.Load(); got != 2 {
				t.Fatalf("%d transactions, want 2 (one 40001, one success)", got)
			}
			if !hasRow(t, direct, "second", l.Token()) {
				t.Fatal("the retried transaction's row is missing")
			}
		})
	}
}

// testDeadlockRetry: two holders that update two rows in opposite order
// deadlock; PostgreSQL aborts one with 40P01, InTx runs it again and both
// commit, each exactly once.
func testDeadlockRetry(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	proxyDSN, direct := f.proxy, f.direct
	// Not protected: both holders write both rows, each under its own lock,
	// to make the deadlock; the test is about InTx running the victim again.
	f.exec(t, "CREATE TABLE acct (id int PRIMARY KEY, n int); INSERT INTO acct VALUES (1, 0), (2, 0)")
	f.grant(t, "acct")
	tr := sharedRedis(t)
	c := tr.client(t, cluster.Client(t), WithTTL(30*time.Second))
	var (
		both    sync.WaitGroup
		attempt [2]atomic.Int32
		errs    [2]error
		wg      sync.WaitGroup
	)
	both.Add(2)
	for i := range 2 {
		l := mustAcquire(t, c, fmt.Sprintf("acct-%d", i))
		defer l.Release(context.Background())
		db := connect(t, proxyDSN)
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, then := 1+i, 2-i // 1 then 2, or 2 then 1
			errs[i] = l.InTx(ctxT(t), db, func(tx pgx.Tx) error {
				a := attempt[i].Add(1)
				if _, err := tx.Exec(ctxT(t), "UPDATE acct SET n = n + 1 WHERE id = $1", first); err != nil {
					return err
				}
				if a == 1 {
					both.Done()
					both.Wait() // each holds its first row: the next update deadlocks
				}
				_, err := tx.Exec(ctxT(t), "UPDATE acct SET n = n + 1 WHERE id = $1", then)
				return err
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
	}
	// At least one victim was retried; its retry may win the rows back
	// before the other and deadlock again, making the other a victim too.
	if got := attempt[0].Load() + attempt[1].Load(); got < 3 {
		t.Fatalf("%d attempts, want at least 3 (a deadlock victim retried)", got)
	}
	var n1, n2 int
	if err := direct.QueryRow(ctxT(t), "SELECT (SELECT n FROM acct WHERE id = 1), (SELECT n FROM acct WHERE id = 2)").Scan(&n1, &n2); err != nil {
		t.Fatal(err)
	}
	if n1 != 2 || n2 != 2 {
		t.Fatalf("acct = %d, %d; want 2, 2", n1, n2)
	}
}

// testFenceTimeoutRetry: a transaction that fenced the resource and then
// stalled holds the mark's row lock; the next holder's fence gives up after
// the database's fencegate.fence_timeout with FG004, and InTx runs the
// transaction again. Once the stalled transaction ends, a retry succeeds.
// With retries off the error matches ErrFenceTimeout and carries the FG004.
func testFenceTimeoutRetry(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	f.exec(t, "ALTER DATABASE "+f.direct.Config().Database+" SET fencegate.fence_timeout = '100ms'")
	tr := sharedRedis(t)
	for _, tc := range []struct {
		name    string
		retries int
	}{{"retried", 1000}, {"retries off", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tr.client(t, cluster.Client(t), WithTTL(time.Minute), WithTxRetries(tc.retries))
			l := mustAcquire(t, c, "stalled-"+strings.ReplaceAll(tc.name, " ", "-"))
			defer l.Release(context.Background())
			// The stalled holder: an earlier transaction of the same lock,
			// fenced and left open.
			stalled, err := connect(t, f.proxy).Begin(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			defer stalled.Rollback(context.Background())
			if err := l.Fence(ctxT(t), stalled); err != nil {
				t.Fatal(err)
			}
			db := &countingDB{Beginner: connect(t, f.proxy)}
			done := make(chan error, 1)
			go func() { done <- l.InTx(ctxT(t), db, insertAs("after-stall", l)) }()
			if tc.retries == 0 {
				err := <-done
				var pgErr *pgconn.PgError
				if !errors.Is(err, ErrFenceTimeout) || errors.Is(err, ErrSerialization) || !errors.As(err, &pgErr) ||
					pgErr.Code != fencegate.CodeFenceTimeout || db.n.Load() != 1 {
					t.Fatalf("InTx behind a stalled holder, retries off: %v after %d attempts; want ErrFenceTimeout with the FG004 after 1",
						err, db.n.Load())
				}
				return
			}
			testutil.Eventually(t, 30*time.Second, "a fence timeout and a retry", func() bool { return db.n.Load() >= 2 })
			if err := stalled.Rollback(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("InTx after the stalled holder ended: %v", err)
			}
			t.Logf("%d attempts", db.n.Load())
			if !hasRow(t, f.direct, "after-stall", l.Token()) {
				t.Fatal("the retried transaction's row is missing")
			}
		})
	}
}

// fakeDB begins fakeTxs whose fence or commit fails as the test says.
type fakeDB struct {
	fenceErr  func(n int) error
	commitErr func(n int) error
	begins    int
}

func (d *fakeDB) Begin(context.Context) (pgx.Tx, error) {
	d.begins++
	return &fakeTx{db: d, n: d.begins}, nil
}

type fakeTx struct {
	pgx.Tx
	db *fakeDB
	n  int
}

func (tx *fakeTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	if tx.db.fenceErr != nil {
		return pgconn.CommandTag{}, tx.db.fenceErr(tx.n)
	}
	return pgconn.CommandTag{}, nil
}

func (tx *fakeTx) Commit(context.Context) error {
	if tx.db.commitErr != nil {
		return tx.db.commitErr(tx.n)
	}
	return nil
}

func (tx *fakeTx) Rollback(context.Context) error { return nil }

func (tx *fakeTx) Conn() *pgx.Conn { return nil }

// TestInTxRetryBounds: InTx runs a transaction that keeps failing with
// 40001 or 40P01 (at the fence or at COMMIT) 1+WithTxRetries times, no
// more once the lease has no time left, and not past its context.
func TestInTxRetryBounds(t *testing.T) {
	serialization := &pgconn.PgError{Code: "40001", Message: "could not serialize access due to concurrent update"}
	deadlock := &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	fenceTimeout := &pgconn.PgError{Code: fencegate.CodeFenceTimeout, Message: "fencegate: fence on r waited longer than 5s"}
	newLock := func(t *testing.T, clk *fakeClock, opts ...Option) *Lock {
		o := defaultOptions()
		for _, opt := range opts {
			opt(&o)
		}
		c := &Client{opts: o, clk: clk, log: testutil.Logger(t)}
		return c.newLock("r", "k", "v", 7, clk.now()+time.Minute)
	}
	t.Run("bounded by the retries", func(t *testing.T) {
		db := &fakeDB{fenceErr: func(int) error { return serialization }}
		err := newLock(t, newFakeClock(), WithTxRetries(3)).InTx(context.Background(), db, func(pgx.Tx) error { return nil })
		if !errors.Is(err, ErrSerialization) || !errors.Is(err, error(serialization)) {
			t.Fatalf("InTx: %v, want ErrSerialization with the 40001", err)
		}
		if db.begins != 4 {
			t.Fatalf("%d attempts, want 4", db.begins)
		}
	})
	t.Run("deadlock at COMMIT, then success", func(t *testing.T) {
		db := &fakeDB{commitErr: func(n int) error {
			if n == 1 {
				return deadlock
			}
			return nil
		}}
		runs := 0
		err := newLock(t, newFakeClock()).InTx(context.Background(), db, func(pgx.Tx) error { runs++; return nil })
		if err != nil || db.begins != 2 || runs != 2 {
			t.Fatalf("InTx: %v after %d attempts, fn ran %d times; want nil after 2, 2", err, db.begins, runs)
		}
	})
	t.Run("not past the lease", func(t *testing.T) {
		clk := newFakeClock()
		l := newLock(t, clk, WithTxRetries(10))
		db := &fakeDB{fenceErr: func(n int) error {
			if n == 2 {
				clk.jump(time.Hour) // the lease passes during the second attempt
			}
			return serialization
		}}
		err := l.InTx(context.Background(), db, func(pgx.Tx) error { return nil })
		if !errors.Is(err, ErrSerialization) || !strings.Contains(err.Error(), "no lease left") {
			t.Fatalf("InTx: %v, want ErrSerialization saying no lease is left", err)
		}
		if db.begins != 2 {
			t.Fatalf("%d attempts, want 2", db.begins)
		}
	})
	t.Run("not past the context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		db := &fakeDB{fenceErr: func(int) error { cancel(); return serialization }}
		err := newLock(t, newFakeClock(), WithTxRetries(10)).InTx(ctx, db, func(pgx.Tx) error { return nil })
		if !errors.Is(err, ErrSerialization) || !errors.Is(err, context.Canceled) || db.begins != 1 {
			t.Fatalf("InTx: %v after %d attempts, want ErrSerialization and context.Canceled after 1", err, db.begins)
		}
	})
	t.Run("fence timeout, then success", func(t *testing.T) {
		db := &fakeDB{fenceErr: func(n int) error {
			if n < 3 {
				return fenceTimeout
			}
			return nil
		}}
		runs := 0
		err := newLock(t, newFakeClock()).InTx(context.Background(), db, func(pgx.Tx) error { runs++; return nil })
		if err != nil || db.begins != 3 || runs != 1 {
			t.Fatalf("InTx: %v after %d attempts, fn ran %d times; want nil after 3, 1", err, db.begins, runs)
		}
	})
	t.Run("fence timeout on every attempt", func(t *testing.T) {
		db := &fakeDB{fenceErr: func(int) error { return fenceTimeout }}
		err := newLock(t, newFakeClock(), WithTxRetries(2)).InTx(context.Background(), db, func(pgx.Tx) error { return nil })
		var pgErr *pgconn.PgError
		if !errors.Is(err, ErrFenceTimeout) || errors.Is(err, ErrSerialization) || !errors.As(err, &pgErr) || pgErr.Code != fencegate.CodeFenceTimeout {
			t.Fatalf("InTx: %v, want ErrFenceTimeout (not ErrSerialization) with the FG004", err)
		}
		if db.begins != 3 || !strings.Contains(err.Error(), "after 3 attempts") {
			t.Fatalf("InTx: %v after %d attempts, want 3", err, db.begins)
		}
	})
	t.Run("other errors are not retried", func(t *testing.T) {
		db := &fakeDB{fenceErr: func(int) error { return &pgconn.PgError{Code: fencegate.CodeStaleToken} }}
		err := newLock(t, newFakeClock()).InTx(context.Background(), db, func(pgx.Tx) error { return nil })
		if !errors.Is(err, ErrStaleToken) || db.begins != 1 {
			t.Fatalf("InTx: %v after %d attempts, want ErrStaleToken after 1", err, db.begins)
		}
	})
}
