package fenceddb_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgdb"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Setup makes a database whose application role writes a protected table
// under a fence only, reuses the roles on a second call, and DropRoles
// leaves no role behind.
func TestSetupProtectDropRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testutil.PostgresDB(t)
	admin := testutil.PostgresAdminDSN()
	owner, app := testutil.RandomName("fg_owner_"), testutil.RandomName("fg_app_")
	db := strings.TrimPrefix(must(url.Parse(dsn)).Path, "/")
	t.Cleanup(func() { _ = pgdb.DropRoles(context.Background(), admin, []string{db}, app, owner) })

	conn := connect(t, dsn)
	d, err := fenceddb.Setup(ctx, conn, fenceddb.Options{Owner: owner, App: app, AppPassword: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	if !d.AppCreated || d.Owner != owner || d.Report == nil || d.Report.OwnerRole != owner {
		t.Fatalf("Setup = %+v; want the app role created and %s owning the schema", d, owner)
	}
	if again, err := fenceddb.Setup(ctx, conn, fenceddb.Options{Owner: owner, App: app, AppPassword: "other"}); err != nil || again.AppCreated || len(again.Report.Actions) != 0 {
		t.Fatalf("second Setup = %+v, %v; want the roles reused and nothing changed", again, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE items (id int PRIMARY KEY, n int)"); err != nil {
		t.Fatal(err)
	}
	if err := d.Protect(ctx, conn, fenceddb.Table{Name: "items", Resource: `'item:' || id`, ToOwner: true}); err != nil {
		t.Fatal(err)
	}
	var tableOwner string
	if err := conn.QueryRow(ctx, "SELECT tableowner FROM pg_tables WHERE tablename = 'items'").Scan(&tableOwner); err != nil || tableOwner != owner {
		t.Fatalf("items owned by %q (%v); want %s", tableOwner, err, owner)
	}

	u := must(url.Parse(dsn))
	u.User = url.UserPassword(app, "pw")
	ac := connect(t, u.String())
	var pe *pgconn.PgError
	if _, err := ac.Exec(ctx, "INSERT INTO items VALUES (1, 1)"); !errors.As(err, &pe) || pe.Code != fencegate.CodeUnfenced {
		t.Fatalf("unfenced insert: %v; want %s", err, fencegate.CodeUnfenced)
	}
	tx, err := ac.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "item:1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO items VALUES (1, 1)"); err != nil {
		t.Fatalf("fenced insert: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ac.Close(ctx)
	conn.Close(ctx)

	if err := pgdb.DropRoles(ctx, admin, []string{db}, app, owner); err != nil {
		t.Fatal(err)
	}
	c := connect(t, admin)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2)", app, owner).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d roles left after DropRoles (%v)", n, err)
	}
}

// Setup refuses an existing application role that is a superuser: the gate
// would refuse its sessions.
func TestSetupRefusesSuperuserApp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testutil.PostgresDB(t)
	app := testutil.RandomName("fg_app_")
	t.Cleanup(func() { _ = pgdb.DropRoles(context.Background(), testutil.PostgresAdminDSN(), nil, app) })
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "CREATE ROLE "+app+" LOGIN SUPERUSER"); err != nil {
		t.Fatal(err)
	}
	if _, err := fenceddb.Setup(ctx, conn, fenceddb.Options{App: app, NoInstall: true}); err == nil || !strings.Contains(err.Error(), "superuser") {
		t.Fatalf("Setup with a superuser application role: %v; want a refusal", err)
	}
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
