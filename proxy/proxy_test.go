package proxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMain(m *testing.M) { testutil.Main(m, "^Example$", "^Example_privilegedRole$") }

// fixture is a fresh database with the fencegate schema, a protected
// orders table (resource 'order:' || id) and an application role that may
// read and write it, and a proxy in front of the database.
type fixture struct {
	admin   string // a superuser, straight to PostgreSQL
	direct  string // the application role, straight to PostgreSQL
	proxied string // the application role, through the proxy
	role    string
	db      *pgfencetest.DB
	p       *proxy.Proxy
}

func newFixture(t *testing.T, opts ...proxytest.Option) fixture {
	t.Helper()
	db := pgfencetest.New(t)
	fx := fixture{admin: db.DSN, direct: db.AppDSN, role: db.App, db: db}
	execAdmin(t, fx.admin, `CREATE TABLE orders (id int PRIMARY KEY, state text NOT NULL);
		INSERT INTO orders VALUES (42, 'new'), (43, 'new');
		GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO `+fx.role)
	protect(t, fx.admin, "orders", `'order:' || id`)
	fx.proxied, fx.p = proxytest.StartProxy(t, fx.direct, opts...)
	return fx
}

// installSchema installs (or repairs) the fencegate schema of db, with
// its owner role and the application grants for its application role.
func installSchema(t testing.TB, db *pgfencetest.DB) {
	t.Helper()
	c := connect(t, db.DSN)
	if _, err := pgfence.Install(context.Background(), c, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}}); err != nil {
		t.Fatal(err)
	}
}

// protect protects table with the resource expression expr.
func protect(t testing.TB, dsn, table, expr string) {
	t.Helper()
	c := connect(t, dsn)
	if err := pgfence.Protect(context.Background(), c, table, expr); err != nil {
		t.Fatal(err)
	}
}

// execAdmin runs sql (one or more statements) on dsn.
func execAdmin(t testing.TB, dsn, sql string) {
	t.Helper()
	c := connect(t, dsn)
	if _, err := c.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	c.Close(context.Background())
}

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func state(t testing.TB, dsn string, id int) string {
	t.Helper()
	c := connect(t, dsn)
	var s string
	if err := c.QueryRow(context.Background(), "SELECT state FROM orders WHERE id = $1", id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func mark(t testing.TB, dsn, resource string) int64 {
	t.Helper()
	c := connect(t, dsn)
	var tok int64 = -1
	err := c.QueryRow(context.Background(), "SELECT token FROM fencegate.marks WHERE resource = $1", resource).Scan(&tok)
	if err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	return tok
}

func TestPgxBasicFence(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	c := connect(t, fx.proxied)
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	write := func(tok int64, st string) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			var got int64
			if err := tx.QueryRow(ctx, "SELECT fencegate.fence($1, $2)", "order:42", tok).Scan(&got); err != nil {
				return err
			}
			if got != tok {
				t.Fatalf("fence(%d) = %d", tok, got)
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = $1 WHERE id = 42", st)
			return err
		})
	}
	if err := write(34, "paid"); err != nil {
		t.Fatalf("fenced write: %v", err)
	}
	if err := write(33, "stale"); sqlstate(err) != "FG001" {
		t.Fatalf("stale fence: %v, want SQLSTATE FG001", err)
	}
	if _, err := c.Exec(ctx, "UPDATE orders SET state = 'x' WHERE id = 43"); sqlstate(err) != "FG002" {
		t.Fatalf("unfenced write: %v, want SQLSTATE FG002", err)
	}
	if got, want := state(t, fx.admin, 42), "paid"; got != want {
		t.Fatalf("state 42 = %q, want %q", got, want)
	}
	if got, want := state(t, fx.admin, 43), "new"; got != want {
		t.Fatalf("state 43 = %q, want %q", got, want)
	}
}
