package proxy_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/pgbouncer"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
)

// The proxy beside PgBouncer, in both orders, against the real thing:
//
//	client -> fencegate proxy -> PgBouncer (transaction pooling) -> PostgreSQL
//	client -> PgBouncer (session or transaction pooling) -> fencegate proxy -> PostgreSQL
//
// In every arrangement a fenced write commits, a stale token is refused
// with FG001 and an unfenced write to a protected table with FG002: the
// fence is a statement of the transaction, and a pooler keeps a
// transaction on one server connection. The tests also pin down what
// differs from a direct connection (see README, "Working with the proxy").

// bouncerDB is a database with a protected table of ten orders, resource
// 'order:' || id, that its application role may read and write.
func bouncerDB(t *testing.T) *pgfencetest.DB {
	t.Helper()
	db := pgfencetest.New(t)
	execAdmin(t, db.DSN, `CREATE TABLE orders (id int PRIMARY KEY, state text NOT NULL);
		INSERT INTO orders SELECT i, 'new' FROM generate_series(1, 10) i;
		GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO `+db.App)
	protect(t, db.DSN, "orders", `'order:' || id`)
	return db
}

// withHost returns dsn with its host and port replaced by those of other.
func withHost(t *testing.T, dsn, other string) string {
	t.Helper()
	u, o := mustURL(t, dsn), mustURL(t, other)
	u.Host = o.Host
	return u.String()
}

// connectMode connects to dsn with the given query execution mode.
func connectMode(t *testing.T, dsn string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// fenceContract runs, on c, a fenced write of order id (it commits), a
// stale one (FG001, nothing committed) and an unfenced write of order
// other (FG002), and checks the rows straight in PostgreSQL.
func fenceContract(t *testing.T, c *pgx.Conn, admin string, id, other int) {
	t.Helper()
	ctx := context.Background()
	res := fmt.Sprintf("order:%d", id)
	write := func(tok int64, st string) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			var got int64
			if err := tx.QueryRow(ctx, fencegate.FenceSQL, res, tok).Scan(&got); err != nil {
				return err
			}
			if got != tok {
				return fmt.Errorf("fence(%d) returned %d", tok, got)
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = $1 WHERE id = $2", st, id)
			return err
		})
	}
	if err := write(34, "paid"); err != nil {
		t.Fatalf("fenced write: %v", err)
	}
	if err := write(33, "stale"); sqlstate(err) != fencegate.CodeStaleToken {
		t.Fatalf("stale token: %v, want SQLSTATE %s", err, fencegate.CodeStaleToken)
	}
	if _, err := c.Exec(ctx, "UPDATE orders SET state = 'unfenced' WHERE id = $1", other); sqlstate(err) != fencegate.CodeUnfenced {
		t.Fatalf("unfenced write: %v, want SQLSTATE %s", err, fencegate.CodeUnfenced)
	}
	// The session goes on after each refusal.
	if err := write(35, "shipped"); err != nil {
		t.Fatalf("fenced write after the refusals: %v", err)
	}
	if got := state(t, admin, id); got != "shipped" {
		t.Fatalf("order %d: %q, want shipped", id, got)
	}
	if got := state(t, admin, other); got != "new" {
		t.Fatalf("order %d: %q, want new", other, got)
	}
	if got := mark(t, admin, res); got != 35 {
		t.Fatalf("mark of %s: %d, want 35", res, got)
	}
}

// preparedClash makes two clients prepare the same named statement
// (pgx's statement cache names a statement after its SQL) through a
// transaction-pooling PgBouncer with one server connection: the second
// client's Parse lands on the server connection that already holds the
// first client's statement, and fails with 42P05. PgBouncer 1.18 does not
// track protocol-level prepared statements (1.21 and later can, with
// max_prepared_statements).
func preparedClash(t *testing.T, dsn string) error {
	t.Helper()
	ctx := context.Background()
	const q = "SELECT count(*) FROM orders WHERE id > $1"
	var n int
	a := connectMode(t, dsn, pgx.QueryExecModeCacheStatement)
	if err := a.QueryRow(ctx, q, 0).Scan(&n); err != nil {
		t.Fatalf("first client's prepared statement: %v", err)
	}
	b := connectMode(t, dsn, pgx.QueryExecModeCacheStatement)
	return b.QueryRow(ctx, q, 0).Scan(&n)
}

// TestProxyInFrontOfPgBouncer: client -> proxy -> PgBouncer (transaction
// pooling) -> PostgreSQL. The gate runs its check in one transaction on
// the session's upstream connection, which a transaction pooler keeps on
// one server connection, so it works as it does direct: the application
// role is admitted, a superuser refused with FG007 (PgBouncer logs in as
// the client's role).
func TestProxyInFrontOfPgBouncer(t *testing.T) {
	db := bouncerDB(t)
	bouncer := pgbouncer.Start(t, db.AppDSN, pgbouncer.Options{
		Mode: pgbouncer.TransactionPooling, Users: []string{db.App, "postgres"}, PoolSize: 1})
	proxied := proxytest.Start(t, bouncer)
	t.Run("simple protocol", func(t *testing.T) {
		fenceContract(t, connectMode(t, proxied, pgx.QueryExecModeSimpleProtocol), db.DSN, 1, 2)
	})
	t.Run("extended protocol, unnamed statements", func(t *testing.T) {
		fenceContract(t, connectMode(t, proxied, pgx.QueryExecModeExec), db.DSN, 3, 4)
	})
	t.Run("gate", func(t *testing.T) {
		refusedWith(t, asUser(t, proxied, "postgres", ""), fencegate.CodePrivilegedRole)
		admitted(t, proxied)
	})
	t.Run("readiness", func(t *testing.T) {
		// The health role's check takes the same way, in one transaction
		// over the simple protocol.
		_, p := proxytest.StartProxy(t, bouncer, withHealth(withUser(t, bouncer, db.App)))
		healthSays(t, p, "")
	})
	t.Run("named prepared statements", func(t *testing.T) {
		if err := preparedClash(t, proxied); sqlstate(err) != "42P05" {
			t.Fatalf("second client's prepared statement: %v, want SQLSTATE 42P05 (already exists on the shared server connection)", err)
		}
	})
	t.Run("session state", func(t *testing.T) {
		// A SET outside a transaction stays on the server connection, not
		// with the client: the next client on that connection inherits it.
		ctx := context.Background()
		a := connectMode(t, proxied, pgx.QueryExecModeSimpleProtocol)
		if _, err := a.Exec(ctx, "SET application_name = 'set-by-a'"); err != nil {
			t.Fatal(err)
		}
		b := connectMode(t, proxied, pgx.QueryExecModeSimpleProtocol)
		var name string
		if err := b.QueryRow(ctx, "SHOW application_name").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name != "set-by-a" {
			t.Fatalf("application_name seen by the second client: %q, want the first client's (one server connection)", name)
		}
	})
}

// TestPgBouncerInFrontOfProxy: client -> PgBouncer -> proxy ->
// PostgreSQL, in session and in transaction pooling. Each server
// connection PgBouncer opens is a session of the proxy and passes the
// gate once, as the role PgBouncer logs in as; a role the gate refuses
// cannot get a server connection, and its client gets the gate's message
// under PgBouncer's SQLSTATE 08P01, not FG007.
func TestPgBouncerInFrontOfProxy(t *testing.T) {
	db := bouncerDB(t)
	proxied := proxytest.Start(t, db.AppDSN)
	for i, mode := range []string{pgbouncer.SessionPooling, pgbouncer.TransactionPooling} {
		t.Run(mode, func(t *testing.T) {
			bouncer := pgbouncer.Start(t, proxied, pgbouncer.Options{
				Mode: mode, Users: []string{db.App, "postgres"}, PoolSize: 1})
			execMode := pgx.QueryExecModeCacheStatement // pgx's default
			if mode == pgbouncer.TransactionPooling {
				execMode = pgx.QueryExecModeExec
			}
			fenceContract(t, connectMode(t, bouncer, execMode), db.DSN, 5+2*i, 6+2*i)
			// PgBouncer 1.18 passes the gate's message on, under its own
			// SQLSTATE (08P01) and without the hint.
			_, err := pgx.Connect(context.Background(), asUser(t, bouncer, "postgres", ""))
			if err == nil || !strings.Contains(err.Error(), "this proxy admits application roles only") {
				t.Fatalf("a superuser through PgBouncer and the proxy: %v, want the gate's refusal", err)
			}
			if mode == pgbouncer.TransactionPooling {
				if err := preparedClash(t, bouncer); sqlstate(err) != "42P05" {
					t.Fatalf("second client's prepared statement: %v, want SQLSTATE 42P05", err)
				}
			}
		})
	}
}

// withUser returns dsn with its user replaced.
func withUser(t *testing.T, dsn, user string) string {
	t.Helper()
	u := mustURL(t, dsn)
	u.User = url.User(user)
	return u.String()
}

// TestPgBouncerKeepsGatedConnections: behind PgBouncer, the gate checks
// the server connections PgBouncer opens, not its clients. A role made
// privileged after PgBouncer's server connection passed the gate gets
// sessions on that connection until PgBouncer closes it, while a session
// straight to the proxy is refused at once.
func TestPgBouncerKeepsGatedConnections(t *testing.T) {
	db := bouncerDB(t)
	proxied := proxytest.Start(t, db.AppDSN, everySession)
	bouncer := pgbouncer.Start(t, proxied, pgbouncer.Options{
		Mode: pgbouncer.SessionPooling, Users: []string{db.App}, PoolSize: 1})
	once := func() {
		t.Helper()
		ctx := context.Background()
		c := connect(t, bouncer)
		defer c.Close(ctx) // give the server connection back to the pool
		var one int
		if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("query through PgBouncer: %v", err)
		}
	}
	once() // PgBouncer's one server connection passes the gate
	execAdmin(t, db.DSN, "GRANT "+db.Owner+" TO "+db.App)
	refusedWith(t, proxied, fencegate.CodePrivilegedRole)
	once() // on the pooled connection, gated before the grant
}

// TestProxyDrainBehindPgBouncer: a proxy that shuts down closes
// PgBouncer's server connections once idle. In session pooling the
// client's session goes with it: the client gets the proxy's 57P01. In
// transaction pooling the client's next transaction waits for a server
// connection (PgBouncer retries every server_login_retry, until
// query_wait_timeout) and goes on once a proxy answers at that address
// again.
func TestProxyDrainBehindPgBouncer(t *testing.T) {
	db := bouncerDB(t)
	for _, mode := range []string{pgbouncer.SessionPooling, pgbouncer.TransactionPooling} {
		t.Run(mode, func(t *testing.T) {
			proxied, p := proxytest.StartProxy(t, db.AppDSN)
			bouncer := pgbouncer.Start(t, proxied, pgbouncer.Options{Mode: mode, Users: []string{db.App, "postgres"}, PoolSize: 1,
				Settings: map[string]string{"server_login_retry": "1", "admin_users": "postgres"}})
			c := connectMode(t, bouncer, pgx.QueryExecModeSimpleProtocol)
			ctx := context.Background()
			if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := p.Shutdown(sctx); err != nil {
				t.Fatalf("shutdown with PgBouncer's connection idle: %v", err)
			}
			qctx, qcancel := context.WithTimeout(ctx, time.Minute)
			defer qcancel()
			if mode == pgbouncer.SessionPooling {
				if _, err := c.Exec(qctx, "SELECT 1"); sqlstate(err) != "57P01" {
					t.Fatalf("a query through PgBouncer after the proxy shut down: %v, want SQLSTATE 57P01", err)
				}
				return
			}
			done := make(chan error, 1)
			go func() { _, err := c.Exec(qctx, "SELECT 1"); done <- err }()
			console := mustURL(t, bouncer)
			console.User, console.Path = url.User("postgres"), "/pgbouncer"
			waiting := connectMode(t, console.String(), pgx.QueryExecModeSimpleProtocol)
			testutil.WaitFor(t, 30*time.Second, "the client to wait in PgBouncer", func() error {
				rows, err := waiting.Query(ctx, "SHOW POOLS")
				if err != nil {
					return err
				}
				n := 0
				for rows.Next() {
					m := rows.FieldDescriptions()
					vals, err := rows.Values()
					if err != nil {
						return err
					}
					row := map[string]any{}
					for i, f := range m {
						row[f.Name] = vals[i]
					}
					if row["database"] == mustURL(t, db.AppDSN).Path[1:] {
						n, _ = strconv.Atoi(fmt.Sprint(row["cl_waiting"]))
					}
				}
				if err := rows.Err(); err != nil {
					return err
				}
				if n != 1 {
					return fmt.Errorf("%d clients waiting", n)
				}
				return nil
			})
			addr := mustURL(t, proxied).Host
			proxytest.Start(t, db.AppDSN, proxytest.WithConfig(func(c *proxy.Config) { c.Listen = addr }))
			if err := <-done; err != nil {
				t.Fatalf("the transaction waiting in PgBouncer after the proxy came back: %v", err)
			}
		})
	}
}
