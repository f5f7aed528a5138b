package fencegatetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// A fenced write through the proxy commits; a write under an older token
// than one the table has seen is refused.
func TestStart(t *testing.T) {
	s := fencegatetest.Start(t, []string{testutil.RedisAddr()}, lockclient.WithTTL(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.DB.Exec(t, "CREATE TABLE orders (id int PRIMARY KEY, state text)")
	if err := pgfence.Protect(ctx, s.DB.Admin(t), "orders", "'order:' || id"); err != nil {
		t.Fatal(err)
	}
	s.DB.Exec(t, "GRANT SELECT, INSERT, UPDATE ON orders TO "+s.DB.App)
	db, err := pgx.Connect(ctx, s.ProxyDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)

	first, err := s.Locks.Acquire(ctx, "order:42")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := s.Locks.Acquire(ctx, "order:42")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d", second.Token(), first.Token())
	}
	if err := second.InTx(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO orders VALUES (42, 'paid')")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := first.Fence(ctx, tx); !errors.Is(err, lockclient.ErrStaleToken) {
		t.Fatalf("fence with the released lock's token: %v, want ErrStaleToken", err)
	}
}
