package fencegatetest_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// A test of a program that takes a lock and writes under it, as it reads
// in that program's own _test.go file, with Redis on 127.0.0.1:6379.
func Example() {
	TestPayOrder := func(t *testing.T) {
		s := fencegatetest.Start(t, []string{"127.0.0.1:6379"})
		ctx := context.Background()
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
		l, err := s.Locks.Acquire(ctx, "order:42")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		err = l.InTx(ctx, db, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO orders VALUES (42, 'paid')")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = TestPayOrder
}
