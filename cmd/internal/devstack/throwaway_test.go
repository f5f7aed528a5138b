package devstack

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
)

// A throwaway stack's application DSN works through the proxy, and once
// the test that started it ends, its database and roles are gone.
func TestThrowawayLeavesNothing(t *testing.T) {
	addr, _ := testutil.Redis(t)
	var db, owner, app string
	t.Run("stack", func(t *testing.T) {
		st, err := StartThrowaway(context.Background(), ThrowawayConfig{
			Prefix: "fg_dev_", Postgres: testutil.PostgresAdminDSN(), Redis: addr, Logger: testutil.Logger(t)})
		if err != nil {
			t.Fatalf("start the stack: %v", err)
		}
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Errorf("stop the stack: %v", err)
			}
		})
		db, owner, app = st.DB.AdminDSN, st.DB.Owner, st.DB.App
		ctx := context.Background()
		c, err := pgx.Connect(ctx, st.ProxyDSN())
		if err != nil {
			t.Fatalf("connect as %s through the proxy: %v", app, err)
		}
		defer c.Close(ctx)
		err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:42', 1)"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = 42")
			return err
		})
		if err != nil {
			t.Fatalf("fenced update through the proxy: %v", err)
		}
	})
	ctx := context.Background()
	c, err := pgx.Connect(ctx, testutil.PostgresAdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	err = c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2))
		+ (SELECT count(*) FROM pg_database WHERE datname = $3)`, owner, app, DatabaseOf(db)).Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("%d of the stack's database and roles left (%v)", n, err)
	}
}
