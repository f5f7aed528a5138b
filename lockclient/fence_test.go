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

// testInTx: a fenced transaction commits; an error from fn rolls it back; a
// write without a fence is refused with ErrUnfenced; a lock without a token
// is refused.
func testInTx(t *testing.T, cluster *tokentest.Cluster) {
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

// testRedlockRestartDoubleGrant: after three of five masters restart
// without persistence while A holds the lock, B is granted it too (the
// double grant Redlock's restart caveat warns of), with a larger token, and
// A does not know. Once B has written, A's fenced write is rejected with
// ErrStaleToken (FG001) and commits nothing; A's next refresh finds the
// lock lost.
func testRedlockRestartDoubleGrant(t *testing.T, cluster *tokentest.Cluster) {
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
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d <= A's %d", b.Token(), a.Token())
	}
	select {
	case <-a.Done():
		t.Fatal("A already knows it lost the lock; the double grant is invisible to it until it refreshes")
	default:
	}
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
	if err := a.Refresh(ctxT(t)); !errors.Is(err, ErrLockLost) {
		t.Fatalf("A.Refresh after the double grant: %v, want ErrLockLost", err)
	}
}

// testPausedHolder: a holder process SIGSTOPped past its TTL, resumed after
// B took the lock and wrote, writes at once: the write fails with
// ErrStaleToken and commits nothing, and its Done closes with ErrLockLost.
func testPausedHolder(t *testing.T, cluster *tokentest.Cluster) {
	proxyDSN, direct := fencedDB(t)
	db := connect(t, proxyDSN)
	h := pausedHolderScenario(t, cluster, proxyDSN, func(b *Lock) {
		if err := b.InTx(ctxT(t), db, insertAs("B", b)); err != nil {
			t.Fatalf("B's fenced write: %v", err)
		}
	})
	if got := h.expect(t, "WRITE"); len(got) == 0 || got[0] != "stale" {
		t.Fatalf("resumed holder's write: %v, want stale (ErrStaleToken)", got)
	}
	if got := h.expect(t, "DONE"); len(got) != 1 || got[0] != "true" {
		t.Fatalf("resumed holder: DONE %v, want true (Done closed with ErrLockLost)", got)
	}
	if got := ledger(t, direct); len(got) != 1 || got[0] != "B" {
		t.Fatalf("ledger=%v, want only B's row", got)
	}
}
