package lockclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// setTokens is a TokenSource whose next token the test sets.
type setTokens struct{ next atomic.Int64 }

func (s *setTokens) NextToken(context.Context, string) (int64, error) { return s.next.Add(1), nil }

// sequential hides SendBatch from InTx: it begins, then fences, in two
// round trips, as InTx did on every Beginner before. It is the reference
// the one-round-trip path is held to.
type sequential struct{ Beginner }

// writeCounter counts the writes on the connections it dials: a round trip
// is one write of the client and the server's answer to it.
type writeCounter struct{ n atomic.Int64 }

func (w *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &w.n}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// SyscallConn keeps InTx's peek before COMMIT (pendingInput) working.
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

func connConfig(t *testing.T, dsn string, w *writeCounter) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if w != nil {
		cfg.DialFunc = w.dial
	}
	return cfg
}

// TestFencedBeginRoundTrips: on a *pgx.Conn and a *pgxpool.Pool, straight
// and through the gate, a fenced transaction of one statement costs the
// round trips of the same transaction unfenced (BEGIN, the statement,
// COMMIT): BEGIN and the fence leave together. Two round trips for them,
// or a fence of its own, fail it.
func TestFencedBeginRoundTrips(t *testing.T) {
	f := fencedDB(t)
	f.exec(t, "CREATE TABLE plain (resource text NOT NULL, holder text NOT NULL, token bigint NOT NULL)")
	f.grant(t, "plain")
	tr := sharedRedis(t)
	c := tr.client(t, &setTokens{}, WithTTL(time.Minute))
	unfenced := func(ctx context.Context, db Beginner) error {
		tx, err := db.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "INSERT INTO plain VALUES ('x', 'plain', 0)"); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	for _, path := range []struct{ name, dsn string }{{"straight", f.app}, {"through the gate", f.proxy}} {
		for _, kind := range []string{"conn", "pool"} {
			t.Run(path.name+", "+kind, func(t *testing.T) {
				var w writeCounter
				cfg := connConfig(t, path.dsn, &w)
				var db Beginner
				if kind == "conn" {
					conn, err := pgx.ConnectConfig(ctxT(t), cfg)
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close(context.Background())
					db = conn
				} else {
					pcfg, err := pgxpool.ParseConfig(path.dsn)
					if err != nil {
						t.Fatal(err)
					}
					pcfg.ConnConfig, pcfg.MaxConns = cfg, 1
					pool, err := pgxpool.NewWithConfig(ctxT(t), pcfg)
					if err != nil {
						t.Fatal(err)
					}
					defer pool.Close()
					db = pool
				}
				l := mustAcquire(t, c, "trips-"+testutil.RandomName(""))
				defer l.Release(context.Background())
				fenced := func(ctx context.Context, db Beginner) error { return l.InTx(ctx, db, insertAs("fenced", l)) }
				// The first transaction of each kind prepares its
				// statements: not counted.
				for _, run := range []func(context.Context, Beginner) error{unfenced, fenced} {
					if err := run(ctxT(t), db); err != nil {
						t.Fatal(err)
					}
				}
				count := func(run func(context.Context, Beginner) error, db Beginner) int64 {
					before := w.n.Load()
					if err := run(ctxT(t), db); err != nil {
						t.Fatal(err)
					}
					return w.n.Load() - before
				}
				plainTrips, fencedTrips, twoTrips := count(unfenced, db), count(fenced, db), count(fenced, sequential{db})
				t.Logf("round trips: unfenced %d, fenced %d, fenced with BEGIN apart %d", plainTrips, fencedTrips, twoTrips)
				if plainTrips != 3 || fencedTrips != plainTrips {
					t.Fatalf("a fenced transaction of one statement took %d round trips, the unfenced one %d; want 3 and 3",
						fencedTrips, plainTrips)
				}
				if twoTrips != plainTrips+1 {
					t.Fatalf("with BEGIN apart: %d round trips, want %d (the counter does not see them)", twoTrips, plainTrips+1)
				}
			})
		}
	}
}

// outcome is what a fenced transaction left behind, in the terms InTx
// promises: how the error classifies, whether it committed, and whether
// the connection is idle, closed or (wrongly) still inside a transaction.
type outcome struct {
	kind     string // errorKind
	canceled bool   // errors.Is(err, context.Canceled)
	lost     bool   // errors.Is(err, ErrLockLost)
	landed   bool
	conn     string // "idle", "closed", or the transaction status seen
}

// TestFencedBeginOutcomes: BEGIN and the fence in one round trip end as
// they do sent apart (the sequential reference), on a *pgx.Conn and on a
// pool of one connection: a fence refused (FG001) rolls back, changes
// nothing and leaves the connection idle (the pool's one connection is
// used again, not replaced); a session that PostgreSQL ended, a context
// that ended before or while the fence waits, and a link cut after the
// server got BEGIN and the fence are plain failures that commit nothing.
func TestFencedBeginOutcomes(t *testing.T) {
	f := fencedDB(t)
	cut, cutDSN := pgCutter(t, f.app)
	// The extended protocol with unnamed statements: each transaction
	// parses its statements again, so the cutter sees the fence's text.
	cutDSN += "&default_query_exec_mode=exec"
	tr := sharedRedis(t)
	src := &setTokens{}
	c := tr.client(t, src, WithTTL(time.Minute), WithTxRetries(0))
	n := 0
	lockAt := func(t *testing.T, resource string, token int64) *Lock {
		src.next.Store(token - 1)
		l := mustAcquire(t, c, resource)
		t.Cleanup(func() { l.Release(context.Background()) })
		return l
	}

	type setup struct {
		ctx    context.Context
		before func(db Beginner) // just before InTx
	}
	scenarios := []struct {
		name string
		dsn  string
		// prepare returns the lock and what to do before and during InTx.
		prepare func(t *testing.T, res string) (*Lock, setup)
		want    outcome
	}{
		{"committed", f.app, func(t *testing.T, res string) (*Lock, setup) {
			return lockAt(t, res, 100), setup{ctx: ctxT(t)}
		}, outcome{kind: "ok", landed: true, conn: "idle"}},

		{"fence refused", f.app, func(t *testing.T, res string) (*Lock, setup) {
			// A later holder fenced the resource with a newer token.
			newer := lockAt(t, res, 300)
			if err := newer.InTx(ctxT(t), connect(t, f.app), func(pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			newer.Release(context.Background())
			return lockAt(t, res, 250), setup{ctx: ctxT(t)}
		}, outcome{kind: "stale_token", conn: "idle"}},

		{"session ended by the server", f.app, func(t *testing.T, res string) (*Lock, setup) {
			return lockAt(t, res, 100), setup{ctx: ctxT(t), before: func(db Beginner) { terminate(t, f.direct, db) }}
		}, outcome{kind: "failed", conn: "closed"}},

		{"context ended before", f.app, func(t *testing.T, res string) (*Lock, setup) {
			ctx, cancel := context.WithCancel(ctxT(t))
			cancel()
			return lockAt(t, res, 100), setup{ctx: ctx}
		}, outcome{kind: "failed", canceled: true}},

		{"context ends while the fence waits", f.app, func(t *testing.T, res string) (*Lock, setup) {
			l := lockAt(t, res, 100)
			// An open transaction holds the resource's mark.
			stalled, err := connect(t, f.app).Begin(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stalled.Rollback(context.Background()) })
			if err := l.Fence(ctxT(t), stalled); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctxT(t))
			watch, err := pgx.Connect(ctxT(t), f.db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			before := func(db Beginner) {
				// Cancel once this connection's fence waits for the mark
				// (or after 30s, which the outcome then shows).
				pid := pidOf(t, db)
				go func() {
					defer watch.Close(context.Background())
					defer cancel()
					for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
						var waiting bool
						err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
							WHERE pid = $1 AND wait_event_type = 'Lock' AND query LIKE '%fencegate.fence%')`, pid).Scan(&waiting)
						if err != nil || waiting {
							return
						}
					}
				}()
			}
			return l, setup{ctx: ctx, before: before}
		}, outcome{kind: "failed", canceled: true, conn: "closed"}},

		{"link cut after the server got BEGIN and the fence", cutDSN, func(t *testing.T, res string) (*Lock, setup) {
			l := lockAt(t, res, 100)
			return l, setup{ctx: ctxT(t), before: func(Beginner) { cut.Arm("fencegate.fence", netfault.CutAfterServer) }}
		}, outcome{kind: "failed", conn: "closed"}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, kind := range []string{"conn", "pool"} {
				var got [2]outcome
				for i, apart := range []bool{false, true} {
					n++
					res := fmt.Sprintf("outcome-%d", n)
					l, s := sc.prepare(t, res)
					db, state := openDB(t, kind, sc.dsn)
					if s.before != nil {
						s.before(db)
					}
					var b Beginner = db
					if apart {
						b = sequential{db}
					}
					err := l.InTx(s.ctx, b, insertRow("w", res, l))
					got[i] = outcome{kind: errorKind(err), canceled: errors.Is(err, context.Canceled), lost: errors.Is(err, ErrLockLost),
						landed: hasResourceRow(t, f.direct, res), conn: state()}
					t.Logf("%s, BEGIN apart %v: %v: %+v", kind, apart, err, got[i])
				}
				want := sc.want
				if want.conn == "" {
					// Which side gives up the connection when the context
					// ended before anything was sent is pgx's choice.
					got[0].conn, got[1].conn = "", ""
				}
				if got[0] != want || got[1] != want {
					t.Fatalf("%s: in one round trip %+v, apart %+v; want %+v", kind, got[0], got[1], want)
				}
			}
		})
	}
}

// openDB connects as kind ("conn", or "pool": a pool of one connection)
// and returns a function that tells the state of the connection after
// InTx; for the pool, "idle" also means it is the connection the pool had
// before InTx, not a new one.
func openDB(t *testing.T, kind, dsn string) (Beginner, func() string) {
	t.Helper()
	if kind == "conn" {
		conn := connect(t, dsn)
		return conn, func() string { return connState(conn) }
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// No ping before handing out a connection: a session the test ended
	// must reach InTx, not be replaced first.
	cfg.MaxConns, cfg.ShouldPing = 1, func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pid := func() uint32 {
		c, err := pool.Acquire(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		return c.Conn().PgConn().PID()
	}
	first := pid()
	return pool, func() string {
		// The pool closes a broken connection on a goroutine of its own.
		for end := time.Now().Add(10 * time.Second); pool.Stat().AcquiredConns() != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				return fmt.Sprintf("%d connections still acquired", pool.Stat().AcquiredConns())
			}
		}
		if pool.Stat().TotalConns() == 0 {
			return "closed"
		}
		c, err := pool.Acquire(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		if c.Conn().PgConn().PID() != first {
			return "closed" // the pool replaced it
		}
		return connState(c.Conn())
	}
}

func connState(c *pgx.Conn) string {
	if c.IsClosed() {
		return "closed"
	}
	if st := c.PgConn().TxStatus(); st != 'I' {
		return fmt.Sprintf("transaction status %q", st)
	}
	var one int
	if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		return "broken: " + err.Error()
	}
	return "idle"
}

// pidOf returns the backend of db's connection (a pool's only one).
func pidOf(t *testing.T, db Beginner) uint32 {
	t.Helper()
	switch d := db.(type) {
	case *pgx.Conn:
		return d.PgConn().PID()
	case *pgxpool.Pool:
		c, err := d.Acquire(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		return c.Conn().PgConn().PID()
	}
	t.Fatalf("no connection in %T", db)
	return 0
}

// terminate ends the session of db's connection from the server's side and
// waits until its backend is gone.
func terminate(t *testing.T, direct *pgx.Conn, db Beginner) {
	t.Helper()
	pid := pidOf(t, db)
	if _, err := direct.Exec(ctxT(t), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the backend to exit", func() bool {
		var n int
		_ = direct.QueryRow(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		return n == 0
	})
}

// hasResourceRow reports whether the ledger holds a row of resource.
func hasResourceRow(t *testing.T, direct *pgx.Conn, resource string) bool {
	t.Helper()
	var n int
	if err := direct.QueryRow(ctxT(t), "SELECT count(*) FROM ledger WHERE resource = $1", resource).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
