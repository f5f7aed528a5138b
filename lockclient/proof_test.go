package lockclient

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/fencegate/fencegate/tokensign"
	"github.com/jackc/pgx/v5"
)

// unsignedSource hides NextSigned: a TokenSource that knows no proofs.
type unsignedSource struct{ TokenSource }

// TestSignedTokens: with a signing token service, Lock keeps each token's
// proof and InTx and Fence pass it, on a database that requires signed
// tokens and on one that does not; a lock without a proof is refused there
// (ErrFenceMisuse), and so is a token of a cluster the database does not
// expect (ErrBadProof); nothing is written either way.
func TestSignedTokens(t *testing.T) {
	ctx := ctxT(t)
	keys, err := tokensign.ParseKeys(strings.NewReader("k1 " + strings.Repeat("9e", 32)))
	if err != nil {
		t.Fatal(err)
	}
	cluster := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.SigningKeys = keys }))
	tokens := cluster.Client(t)
	var cid string
	testutil.WaitFor(t, 30*time.Second, "the cluster id", func() error {
		st, err := tokens.Status(ctx)
		if err != nil || st.ClusterID == "" {
			return errors.New("not recorded yet")
		}
		cid = st.ClusterID
		return nil
	})
	db := pgfencetest.New(t)
	db.Exec(t, "CREATE TABLE ledger (holder text NOT NULL, token bigint NOT NULL); GRANT SELECT, INSERT ON ledger TO "+db.App)
	db.Exec(t, "SELECT fencegate.protect('ledger', $$'ledger'$$)")
	app := db.AppConn(t)
	tr := sharedRedis(t)
	c := tr.client(t, tokens, WithTTL(10*time.Second))
	write := func(l *Lock, who string) error {
		return l.InTx(ctx, app, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ($1, $2)", who, l.Token())
			return err
		})
	}
	rows := func() int {
		var n int
		if err := db.Admin(t).QueryRow(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Not yet required: the signed fence works all the same.
	l := mustAcquire(t, c, "ledger")
	if l.Proof() == "" || keys.Verify(cid, "ledger", l.Token(), l.Proof()) != nil {
		t.Fatalf("lock proof %q does not verify", l.Proof())
	}
	if err := write(l, "a"); err != nil {
		t.Fatalf("InTx on an unsigned database: %v", err)
	}
	l.Release(ctx)

	if _, err := pgfence.RequireSigned(ctx, db.Admin(t), cid, keys); err != nil {
		t.Fatal(err)
	}
	l = mustAcquire(t, c, "ledger")
	// While the signed fence's transaction is open, pg_stat_activity shows
	// the fence with placeholders: the proof (a bearer credential while its
	// token is current) is a bound parameter, never statement text. Also
	// on a connection whose default is the simple protocol (as behind
	// PgBouncer), where pgx would write parameters into the text.
	admin := db.Admin(t)
	simple := pgfencetest.Connect(t, db.AppDSN+"&default_query_exec_mode=simple_protocol")
	for _, conn := range []*pgx.Conn{app, simple} {
		err = l.InTx(ctx, conn, func(tx pgx.Tx) error {
			rows, err := admin.Query(ctx, "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%fencegate.fence%'")
			if err != nil {
				return err
			}
			qs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if len(qs) == 0 {
				t.Errorf("the fence statement is not in pg_stat_activity")
			}
			for _, q := range qs {
				if strings.Contains(q, l.Proof()) || strings.Contains(q, strings.SplitN(l.Proof(), ".", 2)[1]) {
					t.Errorf("pg_stat_activity shows the proof: %q", q)
				}
			}
			t.Logf("pg_stat_activity during a signed fence (%v): %q", conn.Config().DefaultQueryExecMode, qs)
			return nil
		})
		if err != nil {
			t.Fatalf("InTx on a signed database (%v): %v", conn.Config().DefaultQueryExecMode, err)
		}
	}
	if err := write(l, "b"); err != nil {
		t.Fatalf("InTx on a signed database: %v", err)
	}
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Fence(ctx, tx); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	_ = tx.Rollback(ctx)
	l.Release(ctx)

	// A client whose TokenSource gives no proofs: refused, nothing written.
	plain := tr.client(t, unsignedSource{tokens}, WithTTL(10*time.Second))
	l = mustAcquire(t, plain, "ledger")
	if l.Proof() != "" {
		t.Fatalf("proof %q from a source without proofs", l.Proof())
	}
	if err := write(l, "c"); !errors.Is(err, ErrFenceMisuse) || !strings.Contains(err.Error(), "requires signed tokens") {
		t.Fatalf("unsigned token on a signed database: %v", err)
	}
	l.Release(ctx)

	// The database expects another cluster: ErrBadProof.
	if _, err := pgfence.RequireSigned(ctx, db.Admin(t), "another-cluster", keys); err != nil {
		t.Fatal(err)
	}
	l = mustAcquire(t, c, "ledger")
	if err := write(l, "d"); !errors.Is(err, ErrBadProof) {
		t.Fatalf("token of another cluster: %v", err)
	}
	l.Release(ctx)
	if n := rows(); n != 2 {
		t.Fatalf("%d rows written, want 2", n)
	}
}
