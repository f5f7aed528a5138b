package lockclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fenced is a database with the fencegate schema, a protected ledger table
// and an application role, and a fencegate proxy in front of it.
type fenced struct {
	db *pgfencetest.DB
	// proxy connects to the database as the application role through the
	// proxy; app as the same role straight to PostgreSQL.
	proxy, app string
	// direct is the administrator's connection, for setting up and checking
	// tables.
	direct *pgx.Conn
}

// fencedDB creates a fresh database with schema fencegate and the table
// ledger (resource, holder, token), owned by the administrator and
// protected with the resource expression "resource": a row belongs to the
// resource it names. The application role may read and write it. It starts a
// fencegate proxy (which refuses the administrator's sessions) in front of
// it.
func fencedDB(t *testing.T) *fenced {
	t.Helper()
	d := pgfencetest.New(t)
	f := &fenced{db: d, app: d.AppDSN, direct: d.Admin(t)}
	f.exec(t, "CREATE TABLE ledger (resource text NOT NULL, holder text NOT NULL, token bigint NOT NULL)")
	f.protect(t, "ledger", "resource")
	f.proxy = proxytest.Start(t, d.AppDSN)
	return f
}

// exec runs sql as the administrator.
func (f *fenced) exec(t *testing.T, sql string) {
	t.Helper()
	if _, err := f.direct.Exec(ctxT(t), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// protect protects table with the resource expression expr and lets the
// application role read and write it.
func (f *fenced) protect(t *testing.T, table, expr string) {
	t.Helper()
	if err := pgfence.Protect(ctxT(t), f.direct, table, expr); err != nil {
		t.Fatalf("protect %s: %v", table, err)
	}
	f.grant(t, table)
}

// grant lets the application role read and write table (SELECT, INSERT,
// UPDATE, DELETE: what an application role needs, nothing more).
func (f *fenced) grant(t *testing.T, table string) {
	t.Helper()
	f.exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+table+" TO "+f.db.App)
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// insertAs writes holder's row of the lock's resource.
func insertAs(holder string, l *Lock) func(pgx.Tx) error {
	return insertRow(holder, l.Resource(), l)
}

// insertRow writes holder's row of resource, with the lock's token.
func insertRow(holder, resource string, l *Lock) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), "INSERT INTO ledger (resource, holder, token) VALUES ($1, $2, $3)",
			resource, holder, l.Token())
		return err
	}
}

// ledger returns the holders that wrote, in order.
func ledger(t *testing.T, direct *pgx.Conn) []string {
	t.Helper()
	rows, err := direct.Query(ctxT(t), "SELECT holder FROM ledger ORDER BY token, holder")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testInTx: a fenced transaction commits; an error from fn rolls it back;
// the fence guards exactly its resource (a row of another resource is
// refused with ErrUnfenced); a write without a fence is refused with
// ErrUnfenced through the proxy and straight to PostgreSQL alike; a lock
// without a token is refused; the gate refuses the administrator.
func testInTx(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	db := connect(t, f.proxy)
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
	if err := l.InTx(ctxT(t), db, insertRow("B", "other", l)); !errors.Is(err, ErrUnfenced) {
		t.Fatalf("InTx of lock %q writing a row of resource \"other\": %v, want ErrUnfenced", l.Resource(), err)
	}
	// Straight to PostgreSQL, as the same role, the fence works the same.
	if err := l.InTx(ctxT(t), connect(t, f.app), insertAs("C", l)); err != nil {
		t.Fatalf("InTx straight to PostgreSQL: %v", err)
	}
	if got := ledger(t, f.direct); len(got) != 2 || got[0] != "A" || got[1] != "C" {
		t.Fatalf("ledger=%v, want [A C]", got)
	}

	for path, conn := range map[string]*pgx.Conn{"through the proxy": db, "straight to PostgreSQL": connect(t, f.app)} {
		tx, err := conn.Begin(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctxT(t), "INSERT INTO ledger (resource, holder, token) VALUES ('ledger', 'D', 0)")
		if err == nil {
			err = tx.Commit(ctxT(t))
		}
		tx.Rollback(ctxT(t))
		var pgErr *pgconn.PgError
		if err := fenceError(err); !errors.Is(err, ErrUnfenced) || !errors.As(err, &pgErr) || pgErr.Code != fencegate.CodeUnfenced {
			t.Fatalf("unfenced write %s: %v, want ErrUnfenced with its FG002", path, err)
		}
	}
	if got := ledger(t, f.direct); len(got) != 2 {
		t.Fatalf("ledger=%v after the unfenced writes, want [A C]", got)
	}

	eff := mustAcquire(t, tr.client(t, nil), "other")
	defer eff.Release(context.Background())
	if err := eff.InTx(ctxT(t), db, insertAs("E", eff)); !errors.Is(err, ErrNoToken) {
		t.Fatalf("InTx with an efficiency lock: %v, want ErrNoToken", err)
	}

	cfg, err := pgx.ParseConfig(f.db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pgx.Connect(ctxT(t), pgfencetest.WithUser(t, f.proxy, cfg.User))
	if err := fenceError(err); !errors.Is(err, ErrPrivilegedRole) {
		t.Fatalf("the administrator through the proxy: %v, want ErrPrivilegedRole", err)
	}
}

// testRedlockRestartDoubleGrant: after three of five masters restart
// without persistence while A holds the lock, B is granted it too (the
// double grant Redlock's restart caveat warns of), with a larger token, and
// A does not know. Once B has written, A's fenced write is rejected with
// ErrStaleToken (FG001) and commits nothing; A's next refresh finds the
// lock lost.
func testRedlockRestartDoubleGrant(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	proxyDSN, direct := f.proxy, f.direct
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
	if !errors.As(err, &pgErr) || pgErr.Code != fencegate.CodeStaleToken {
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
func testPausedHolder(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	db := connect(t, f.proxy)
	h := pausedHolderScenario(t, cluster, f.proxy, func(b *Lock) {
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
	if got := ledger(t, f.direct); len(got) != 1 || got[0] != "B" {
		t.Fatalf("ledger=%v, want only B's row", got)
	}
}
