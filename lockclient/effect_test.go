package lockclient

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
)

// TestEffect: through the gate, the current holder's InTx records effects
// (any value encoded as JSON, raw JSON as it is); a holder whose lease
// ended and whose lock another holder took records none: InTx's fence
// refuses it (ErrStaleToken) before fn runs; Effect on a transaction
// without the fence is ErrUnfenced; an fn that fails leaves no effect.
func TestEffect(t *testing.T) {
	cluster := tokenservicetest.StartCluster(t, 1)
	f := fencedDB(t)
	tr := sharedRedis(t)
	ctx := ctxT(t)
	c := tr.client(t, cluster.Client(t), WithTTL(300*time.Millisecond))
	stale := mustAcquire(t, c, "pay:1")
	waitDone(t, stale, "the first lease to end")
	cur := mustAcquire(t, tr.client(t, cluster.Client(t), WithTTL(10*time.Second)), "pay:1")
	defer cur.Release(context.Background()) //nolint:errcheck
	db := connect(t, f.proxy)

	var ids []int64
	if err := cur.InTx(ctx, db, func(tx pgx.Tx) error {
		for _, p := range []any{map[string]int{"amount": 10}, json.RawMessage(`{"amount": 11}`)} {
			id, err := cur.Effect(ctx, tx, "payments", p)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := stale.InTx(ctx, db, func(tx pgx.Tx) error {
		ran = true
		_, err := stale.Effect(ctx, tx, "payments", map[string]int{"amount": 99})
		return err
	})
	if !errors.Is(err, ErrStaleToken) || ran {
		t.Fatalf("stale holder's InTx: %v (fn ran: %v), want ErrStaleToken before fn", err, ran)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cur.Effect(ctx, tx, "payments", map[string]int{"amount": 98}); !errors.Is(err, ErrUnfenced) {
		t.Fatalf("Effect without a fence: %v, want ErrUnfenced", err)
	}
	tx.Rollback(ctx) //nolint:errcheck
	if err := cur.InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := cur.Effect(ctx, tx, "payments", map[string]int{"amount": 97}); err != nil {
			return err
		}
		return errors.New("changed my mind")
	}); err == nil {
		t.Fatal("InTx with a failing fn succeeded")
	}
	if _, err := cur.Effect(ctx, nil, "payments", func() {}); err == nil {
		t.Fatal("a payload that is not JSON was accepted")
	}
	rows, err := f.direct.Query(ctx, "SELECT token, payload::text FROM fencegate.effects ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	type eff struct {
		Token   int64
		Payload string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[eff])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Token != cur.Token() || got[0].Payload != `{"amount": 10}` || got[1].Payload != `{"amount": 11}` || len(ids) != 2 || ids[0] >= ids[1] {
		t.Fatalf("effects %+v (ids %v), want the current holder's two, token %d", got, ids, cur.Token())
	}
}
