package devstack

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/pgdb"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SetupFenced is idempotent: a second call reuses the roles, changes nothing
// in the schema and keeps the password it does not know. The application
// role can write a protected table under a fence only, and DropRoles leaves
// neither role behind.
func TestSetupFencedTwiceAndDropRoles(t *testing.T) {
	ctx := context.Background()
	admin := testutil.PostgresAdminDSN()
	dsn := testutil.PostgresDB(t)
	owner, app := testutil.RandomName("fg_owner_"), testutil.RandomName("fg_app_")
	dropped := false
	t.Cleanup(func() {
		if !dropped {
			_ = pgdb.DropRoles(ctx, admin, []string{DatabaseOf(dsn)}, app, owner)
		}
	})
	d, err := SetupFenced(ctx, FencedOptions{AdminDSN: dsn, Owner: owner, App: app})
	if err != nil {
		t.Fatal(err)
	}
	if d.AppPassword == "" || d.Report.FromVersion != 0 || d.Report.OwnerRole != owner {
		t.Fatalf("first setup: password set %v, report %+v", d.AppPassword != "", d.Report)
	}
	again, err := SetupFenced(ctx, FencedOptions{AdminDSN: dsn, Owner: owner, App: app})
	if err != nil {
		t.Fatal(err)
	}
	if again.AppPassword != "" || len(again.Report.Actions) != 0 {
		t.Fatalf("second setup: password reset %v, actions %q; want neither", again.AppPassword != "", again.Report.Actions)
	}

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, DemoTablesSQL+"INSERT INTO orders VALUES (42, 'Alice', 4999, 'unpaid');"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // protecting again with the same expression is fine
		if err := d.Protect(ctx, conn, Protected("orders", OrdersResource)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgx.ParseConfig(d.AppDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = d.AppPassword
	ac, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect as %s: %v", app, err)
	}
	defer ac.Close(ctx)
	update := func(fence bool) error {
		return pgx.BeginFunc(ctx, ac, func(tx pgx.Tx) error {
			if fence {
				if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:42', 7)"); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = 42")
			return err
		})
	}
	var pe *pgconn.PgError
	if err := update(false); !errors.As(err, &pe) || pe.Code != fencegate.CodeUnfenced {
		t.Fatalf("unfenced update as %s: %v; want FG002", app, err)
	}
	if err := update(true); err != nil {
		t.Fatalf("fenced update as %s: %v", app, err)
	}
	if _, err := ac.Exec(ctx, "ALTER TABLE orders DISABLE TRIGGER ALL"); err == nil {
		t.Fatalf("%s could alter the protected table", app)
	}
	ac.Close(ctx)

	dropped = true
	if err := pgdb.DropRoles(ctx, admin, []string{DatabaseOf(dsn)}, app, owner); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2)", app, owner).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d of the roles left after DropRoles (%v)", n, err)
	}
}

// A DSN of a role that is not a superuser is refused with one line saying
// what is needed.
func TestSetupFencedNeedsSuperuser(t *testing.T) {
	ctx := context.Background()
	admin := testutil.PostgresAdminDSN()
	dsn := testutil.PostgresDB(t)
	weak := testutil.RandomName("fg_weak_")
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE ROLE "+weak+" LOGIN CREATEDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pgdb.DropRoles(context.Background(), admin, nil, weak) })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(weak)
	_, err = SetupFenced(ctx, FencedOptions{AdminDSN: u.String(), App: testutil.RandomName("fg_app_")})
	if err == nil || !strings.Contains(err.Error(), "not a superuser") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("SetupFenced as %s: %v; want one line saying a superuser is needed", weak, err)
	}
}
