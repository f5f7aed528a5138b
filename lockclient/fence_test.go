package lockclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/proxytest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/internal/tokentest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fencedDB creates a fresh database with a ledger table and starts a
// fencegate proxy in front of it; it returns the proxy's DSN and a direct
// connection for checking the table.
func fencedDB(t *testing.T) (proxyDSN string, direct *pgx.Conn) {
	t.Helper()
	dsn := testutil.PostgresDB(t)
	direct, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	t.Cleanup(func() { direct.Close(context.Background()) })
	if _, err := direct.Exec(ctxT(t), "CREATE TABLE ledger (holder text NOT NULL, token bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return proxytest.Start(t, dsn), direct
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func insertAs(holder string, l *Lock) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), "INSERT INTO ledger (holder, token) VALUES ($1, $2)", holder, l.Token())
		return err
	}
}

// ledger returns the holders that wrote, in order.
func ledger(t *testing.T, direct *pgx.Conn) []string {
	t.Helper()
	rows, err := direct.Query(ctxT(t), "SELECT holder FROM ledger ORDER BY token")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInTx: a fenced transaction commits; an error from fn rolls it back; a
// write without a fence is refused with ErrUnfenced; a lock without a token
// is refused.
func TestInTx(t *testing.T) {
	cluster := tokentest.StartCluster(t, 3)
	proxyDSN, direct := fencedDB(t)
	db := connect(t, proxyDSN)
	tr := sharedRedis(t)
	l := mustAcquire(t, tr.client(t, cluster.Client(t)), "ledger")
	defer l.Release(context.Background())

	if err := l.InTx(ctxT(t), db, insertAs("A", l)); err != nil {
		t.Fatalf("InTx: %v", err)
	}
	boom := errors.New("boom")
	if err := l.InTx(ctxT(t), db, func(tx pgx.Tx) error { insertAs("B", l)(tx); return boom }); !errors.Is(err, boom) {
		t.Fatalf("InTx with a failing fn: %v, want boom", err)
	}
	if got := ledger(t, direct); len(got) != 1 || got[0] != "A" {
		t.Fatalf("ledger=%v, want [A]", got)
	}

	tx, err := db.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctxT(t), "INSERT INTO ledger (holder, token) VALUES ('C', 0)")
	if err == nil {
		err = tx.Commit(ctxT(t))
	}
	tx.Rollback(ctxT(t))
	if err := fenceError(err); !errors.Is(err, ErrUnfenced) {
		t.Fatalf("unfenced write through the proxy: %v, want ErrUnfenced", err)
	}

	eff := mustAcquire(t, tr.client(t, nil), "other")
	defer eff.Release(context.Background())
	if err := eff.InTx(ctxT(t), db, insertAs("D", eff)); !errors.Is(err, ErrNoToken) {
		t.Fatalf("InTx with an efficiency lock: %v, want ErrNoToken", err)
	}
}

// TestPausedHolderFenced: the paused holder (a SIGSTOPped process) resumes
// after B took the lock and wrote; its write fails with ErrStaleToken and
// commits nothing, and its Done closes.
func TestPausedHolderFenced(t *testing.T) {
	proxyDSN, direct := fencedDB(t)
	db := connect(t, proxyDSN)
	_, _, h := pausedHolderScenario(t, proxyDSN, func(b *Lock) {
		if err := b.InTx(ctxT(t), db, insertAs("B", b)); err != nil {
			t.Fatalf("B's fenced write: %v", err)
		}
	})
	if got := h.expect(t, "WRITE"); len(got) == 0 || got[0] != "stale" {
		t.Fatalf("resumed holder's write: %v, want stale (ErrStaleToken)", got)
	}
	if got := h.expect(t, "DONE"); len(got) != 1 || got[0] != "true" {
		t.Fatalf("resumed holder: DONE %v, want true", got)
	}
	if got := ledger(t, direct); len(got) != 1 || got[0] != "B" {
		t.Fatalf("ledger=%v, want only B's row", got)
	}
}

// TestRedlockRestartDoubleGrantFenced: after three of five masters restart
// without persistence, A and B both hold the lock; once B has written, A's
// fenced write is rejected with ErrStaleToken (FG001) and commits nothing.
func TestRedlockRestartDoubleGrantFenced(t *testing.T) {
	cluster := tokentest.StartCluster(t, 3)
	proxyDSN, direct := fencedDB(t)
	tr := startMasters(t, 5)
	c := tr.client(t, cluster.Client(t), WithTTL(30*time.Second), WithRetry(NoRetry()))
	a := mustAcquire(t, c, "ledger")
	if err := a.InTx(ctxT(t), connect(t, proxyDSN), insertAs("A1", a)); err != nil {
		t.Fatalf("A's first write: %v", err)
	}
	for _, s := range tr.servers[:3] {
		s.Kill()
		s.Start()
	}
	b, err := c.TryAcquire(ctxT(t), "ledger")
	if err != nil {
		t.Fatalf("B's TryAcquire after the restarts: %v", err)
	}
	defer b.Release(context.Background())
	if err := b.InTx(ctxT(t), connect(t, proxyDSN), insertAs("B", b)); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	err = a.InTx(ctxT(t), connect(t, proxyDSN), insertAs("A2", a))
	if !errors.Is(err, ErrStaleToken) {
		t.Fatalf("A's write after B's: %v, want ErrStaleToken", err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "FG001" {
		t.Fatalf("A's error carries no FG001 PgError: %v", err)
	}
	if got := ledger(t, direct); len(got) != 2 || got[0] != "A1" || got[1] != "B" {
		t.Fatalf("ledger=%v, want [A1 B]", got)
	}
}
