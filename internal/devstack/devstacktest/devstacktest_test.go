package devstacktest

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/devstack"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// The stack's application DSN works through the proxy, and once the test
// that started it ends, its database and roles are gone.
func TestStartLeavesNothing(t *testing.T) {
	addr, _ := testutil.Redis(t)
	var db, owner, app string
	t.Run("stack", func(t *testing.T) {
		st := Start(t, addr)
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
		+ (SELECT count(*) FROM pg_database WHERE datname = $3)`, owner, app, devstack.DatabaseOf(db)).Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("%d of the stack's database and roles left (%v)", n, err)
	}
}
