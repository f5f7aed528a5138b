package lockclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// testLapsedLeaseSaysLockLost: the README's snippet for a holder whose lease
// lapsed (InTx under l.Context(), straight and through the
// gate): the error matches ErrLockLost, and context.Canceled still. Before,
// it was "begin fenced transaction: context canceled", matching neither
// ErrLockLost nor ErrStaleToken. So does Fence under the lapsed context.
func testLapsedLeaseSaysLockLost(t *testing.T, cluster *tokenservicetest.Cluster) {
	f := fencedDB(t)
	tr := sharedRedis(t)
	c := tr.client(t, cluster.Client(t), WithTTL(200*time.Millisecond))
	for _, path := range []struct{ name, dsn string }{{"straight", f.app}, {"through the gate", f.proxy}} {
		t.Run(path.name, func(t *testing.T) {
			db := connect(t, path.dsn)
			l := mustAcquire(t, c, "lapsed-"+path.name)
			waitDone(t, l, "the lease to lapse")
			err := l.InTx(l.Context(), db, insertAs("lapsed", l))
			t.Logf("InTx after the lease lapsed: %v", err)
			if !errors.Is(err, ErrLockLost) || !errors.Is(err, context.Canceled) {
				t.Fatalf("InTx = %v; want ErrLockLost and context.Canceled", err)
			}
			// pgx closed db when Begin met the ended context.
			tx, err := connect(t, path.dsn).Begin(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctxT(t))
			if err := l.Fence(l.Context(), tx); !errors.Is(err, ErrLockLost) {
				t.Fatalf("Fence = %v; want ErrLockLost", err)
			}
		})
	}
}
