package lockclient

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
)

// testCommitOutcome cuts the link at each point around COMMIT, straight to
// PostgreSQL and between the gate and PostgreSQL, and checks InTx's verdict
// against the row: a link cut before COMMIT was sent is a plain failure
// (nothing committed); after COMMIT reached the server it is
// ErrCommitUnknown (it committed) — through the gate too, where the gate
// answers the in-flight COMMIT with its own FATAL 08006, which InTx took
// for PostgreSQL's answer and reported as a plain failure before; after the
// answer InTx returns nil.
func testCommitOutcome(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	tr := sharedRedis(t)
	c := tr.client(t, cluster.Client(t))
	straight, straightDSN := pgCutter(t, f.app)
	gateCut, gateUpDSN := pgCutter(t, f.app)
	gateDSN := proxytest.Start(t, gateUpDSN)
	n := 0
	for _, path := range []struct {
		name string
		cut  *netfault.PGCutter
		dsn  string
	}{{"straight", straight, straightDSN}, {"through the gate", gateCut, gateDSN}} {
		for _, point := range []netfault.CutPoint{netfault.CutBefore, netfault.CutAfterServer, netfault.CutAfterAnswer} {
			t.Run(fmt.Sprintf("%s, %s", path.name, point), func(t *testing.T) {
				n++
				db := connect(t, path.dsn)
				l := mustAcquire(t, c, fmt.Sprintf("outcome-%d-%s", n, testutil.RandomName("")))
				defer l.Release(ctxT(t))
				word := "commit"
				if point == netfault.CutBefore {
					word = "insert into ledger"
				}
				fired := path.cut.Arm(word, point)
				err := l.InTx(l.Context(), db, insertAs("w", l))
				<-fired
				landed := hasRow(t, f.direct, "w", l.Token())
				t.Logf("InTx: %v; row committed: %v", err, landed)
				switch point {
				case netfault.CutBefore:
					if err == nil || errors.Is(err, ErrCommitUnknown) || landed {
						t.Fatalf("InTx = %v, committed %v; want a plain failure and no row", err, landed)
					}
				case netfault.CutAfterServer:
					if !errors.Is(err, ErrCommitUnknown) || !landed {
						t.Fatalf("InTx = %v, committed %v; want ErrCommitUnknown and the row", err, landed)
					}
				case netfault.CutAfterAnswer:
					if err != nil || !landed {
						t.Fatalf("InTx = %v, committed %v; want nil and the row", err, landed)
					}
				}
			})
		}
	}
}

// testKilledBeforeCommit: PostgreSQL ends the session (pg_terminate_backend)
// while fn runs; fn returns nil, so InTx would send COMMIT on a session
// that is over and read the server's FATAL 57P01 as COMMIT's answer, which
// is "unknown" during a COMMIT. Nothing was committed: InTx says so with a
// plain failure, straight and through the gate.
func testKilledBeforeCommit(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	tr := sharedRedis(t)
	c := tr.client(t, cluster.Client(t))
	for _, path := range []struct{ name, dsn string }{{"straight", f.app}, {"through the gate", f.proxy}} {
		t.Run(path.name, func(t *testing.T) {
			db := connect(t, path.dsn)
			l := mustAcquire(t, c, "killed-"+testutil.RandomName(""))
			defer l.Release(ctxT(t))
			err := l.InTx(l.Context(), db, func(tx pgx.Tx) error {
				if err := insertAs("k", l)(tx); err != nil {
					return err
				}
				var pid int
				if err := tx.QueryRow(ctxT(t), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				if _, err := f.direct.Exec(ctxT(t), "SELECT pg_terminate_backend($1)", pid); err != nil {
					t.Fatal(err)
				}
				// The backend is gone once it left pg_stat_activity: its
				// FATAL was sent before.
				testutil.Eventually(t, 30*time.Second, "the backend to exit", func() bool {
					var n int
					_ = f.direct.QueryRow(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
					return n == 0
				})
				return nil
			})
			landed := hasRow(t, f.direct, "k", l.Token())
			t.Logf("InTx: %v; committed: %v", err, landed)
			if err == nil || errors.Is(err, ErrCommitUnknown) || landed {
				t.Fatalf("InTx = %v, committed %v; want a plain failure and no row", err, landed)
			}
		})
	}
}

// pgCutter puts a netfault.PGCutter in front of the server of dsn.
func pgCutter(t *testing.T, dsn string) (*netfault.PGCutter, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := netfault.NewPGCutter(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	out, err := c.DSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return c, out
}
