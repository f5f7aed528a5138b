package proxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/proxytest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// fixture is a fresh database with an orders table, and a proxy before it.
type fixture struct {
	direct, proxied string
}

func newFixture(t *testing.T, opts ...proxytest.Option) fixture {
	t.Helper()
	direct := testutil.PostgresDB(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, state text NOT NULL);
		INSERT INTO orders VALUES (42, 'new'), (43, 'new')`); err != nil {
		t.Fatal(err)
	}
	return fixture{direct: direct, proxied: proxytest.Start(t, direct, opts...)}
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

func TestPgxBasicFence(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	c := connect(t, fx.proxied)
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	if err := tx.QueryRow(ctx, "SELECT fencegate.fence($1, $2)", "order:42", int64(34)).Scan(&got); err != nil || got != 34 {
		t.Fatalf("fence = %d, %v", got, err)
	}
	if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = 42"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := state(t, fx.direct, 42), "paid"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	// A stale token.
	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = tx.QueryRow(ctx, "SELECT fencegate.fence($1, $2)", "order:42", int64(33)).Scan(&got)
	if got, want := sqlstate(err), "FG001"; got != want {
		t.Fatalf("stale fence: %v (SQLSTATE %q), want %s", err, got, want)
	}
	tx.Rollback(ctx)
	// An unfenced write.
	_, err = c.Exec(ctx, "UPDATE orders SET state = 'x' WHERE id = 43")
	if got, want := sqlstate(err), "FG002"; got != want {
		t.Fatalf("unfenced write: %v (SQLSTATE %q), want %s", err, got, want)
	}
	if got, want := state(t, fx.direct, 43), "new"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
}
