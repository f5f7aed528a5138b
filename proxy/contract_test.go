package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// modes are the pgx query modes the contract is checked with: the simple
// protocol (arguments inlined as literals), the extended protocol with
// cached prepared statements, and the extended protocol with the unnamed
// statement described on every execution.
var modes = []struct {
	name string
	mode pgx.QueryExecMode
}{
	{"simple", pgx.QueryExecModeSimpleProtocol},
	{"prepared", pgx.QueryExecModeCacheStatement},
	{"describe", pgx.QueryExecModeDescribeExec},
}

// fencedExec runs sql as the superuser of dsn in a transaction fenced on
// resource with token: protected tables refuse every other write, the
// superuser's included.
func fencedExec(t testing.TB, dsn, resource string, token int64, sql string) {
	t.Helper()
	c := connect(t, dsn)
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fencegate.FenceSQL, resource, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql)
		return err
	}); err != nil {
		t.Fatalf("%s (fenced on %s with %d): %v", sql, resource, token, err)
	}
}

func TestContractPgx(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	execAdmin(t, fx.admin, `CREATE FUNCTION set_state(i int, s text) RETURNS int LANGUAGE sql AS $$ UPDATE orders SET state = s WHERE id = i RETURNING 1 $$;
		GRANT EXECUTE ON FUNCTION set_state(int, text) TO `+fx.role)
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			c := connect(t, fx.proxied)
			id := 100 + i
			res := fmt.Sprintf("order:%d", id)
			fencedExec(t, fx.admin, res, 1, fmt.Sprintf("INSERT INTO orders VALUES (%d, 'new')", id))
			fence := func(tx pgx.Tx, tok any) (int64, error) {
				var got int64
				err := tx.QueryRow(ctx, "SELECT fencegate.fence($1, $2)", m.mode, res, tok).Scan(&got)
				return got, err
			}
			setState := func(tok int64, st string) error {
				tx, err := c.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx)
				if got, err := fence(tx, tok); err != nil {
					return err
				} else if got != tok {
					t.Fatalf("fence(%d) = %d", tok, got)
				}
				if _, err := tx.Exec(ctx, "UPDATE orders SET state = $1 WHERE id = $2", m.mode, st, id); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}
			// Accepted, then equal token accepted again.
			if err := setState(34, "paid"); err != nil {
				t.Fatalf("fenced write: %v", err)
			}
			if err := setState(34, "shipped"); err != nil {
				t.Fatalf("fenced write, equal token: %v", err)
			}
			if got, want := state(t, fx.admin, id), "shipped"; got != want {
				t.Fatalf("state = %q, want %q", got, want)
			}
			// Stale token: FG001 naming resource, offered and current token; nothing commits.
			err := setState(33, "stale")
			if got, want := sqlstate(err), "FG001"; got != want {
				t.Fatalf("stale: %v, want SQLSTATE %s", err, want)
			}
			for _, part := range []string{res, "33", "34"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("stale error %q does not name %q", err, part)
				}
			}
			if got, want := state(t, fx.admin, id), "shipped"; got != want {
				t.Fatalf("after stale: state = %q, want %q", got, want)
			}
			if got, want := mark(t, fx.admin, res), int64(34); got != want {
				t.Fatalf("mark = %d, want %d", got, want)
			}
			// Unfenced writes, refused by PostgreSQL: autocommit, explicit
			// transaction, function, writable CTE, INSERT, DELETE, MERGE,
			// COPY FROM.
			for _, q := range testutil.WithoutMerge(t, []string{
				fmt.Sprintf("UPDATE orders SET state = 'x' WHERE id = %d", id),
				fmt.Sprintf("SELECT set_state(%d, 'x')", id),
				fmt.Sprintf("WITH u AS (UPDATE orders SET state = 'x' WHERE id = %d RETURNING id) SELECT count(*) FROM u", id),
				"INSERT INTO orders VALUES (99, 'x')",
				fmt.Sprintf("DELETE FROM orders WHERE id = %d", id),
				fmt.Sprintf("MERGE INTO orders o USING (VALUES (%d)) v(id) ON o.id = v.id WHEN MATCHED THEN UPDATE SET state = 'x'", id),
			}) {
				_, err := c.Exec(ctx, q, m.mode)
				if got, want := sqlstate(err), "FG002"; got != want {
					t.Errorf("autocommit %q: %v, want SQLSTATE %s", q, err, want)
				}
				tx, err := c.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				_, err = tx.Exec(ctx, q, m.mode)
				if got, want := sqlstate(err), "FG002"; got != want {
					t.Errorf("in transaction %q: %v, want SQLSTATE %s", q, err, want)
				}
				_ = tx.Commit(ctx)
			}
			if _, err := c.PgConn().CopyFrom(ctx, strings.NewReader("77\tcopied\n"), "COPY orders (id, state) FROM STDIN"); sqlstate(err) != "FG002" {
				t.Errorf("COPY FROM: %v, want SQLSTATE FG002", err)
			}
			if got, want := state(t, fx.admin, id), "shipped"; got != want {
				t.Fatalf("after unfenced writes: state = %q, want %q", got, want)
			}
			var n int
			if err := connect(t, fx.admin).QueryRow(ctx, "SELECT count(*) FROM orders WHERE id IN (77, 99)").Scan(&n); err != nil || n != 0 {
				t.Fatalf("rows written without a fence = %d, %v; want 0", n, err)
			}
			// Reads need no fence.
			var s string
			if err := c.QueryRow(ctx, "SELECT state FROM orders WHERE id = 43", m.mode).Scan(&s); err != nil {
				t.Fatalf("autocommit read: %v", err)
			}
			// Misuse: NULL or negative token, empty resource.
			var got int64
			for _, args := range [][]any{{res, nil}, {res, -1}, {"", 5}} {
				tx, err := c.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				err = tx.QueryRow(ctx, "SELECT fencegate.fence($1, $2)", m.mode, args[0], args[1]).Scan(&got)
				if sqlstate(err) != "FG003" {
					t.Errorf("fence%v: %v, want SQLSTATE FG003", args, err)
				}
				tx.Rollback(ctx)
			}
			// A fence guards exactly its resource: this row's fence does not
			// let the transaction write order 43.
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fence(tx, 34); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'other' WHERE id = 43", m.mode); sqlstate(err) != "FG002" {
				t.Errorf("write to another resource's row: %v, want SQLSTATE FG002", err)
			}
			tx.Rollback(ctx)
			// Two fences (two resources) in one transaction: both rows.
			tx, err = c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fence(tx, 35); err != nil {
				t.Fatalf("first fence: %v", err)
			}
			if err := tx.QueryRow(ctx, "SELECT fencegate.fence($1, $2)", m.mode, "order:43", 100+i).Scan(&got); err != nil {
				t.Fatalf("second fence: %v", err)
			}
			if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'both' WHERE id IN ($1, 43)", m.mode, id); err != nil {
				t.Fatalf("write under two fences: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got, want := state(t, fx.admin, id), "both"; got != want {
				t.Fatalf("state = %q, want %q", got, want)
			}
		})
	}
}

func TestContractSimpleMultiStatement(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	c := connect(t, fx.proxied)
	pc := c.PgConn()
	run := func(sql string) error {
		_, err := pc.Exec(ctx, sql).ReadAll()
		return err
	}
	// The README session in one Query message, and the implicit transaction form.
	if err := run("BEGIN; SELECT fencegate.fence('order:42', 34); UPDATE orders SET state = 'paid' WHERE id = 42; COMMIT;"); err != nil {
		t.Fatalf("explicit block in one query: %v", err)
	}
	if err := run("SELECT fencegate.fence('order:42', 35); UPDATE orders SET state = 'shipped' WHERE id = 42"); err != nil {
		t.Fatalf("implicit transaction: %v", err)
	}
	if got, want := state(t, fx.admin, 42), "shipped"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	results, err := pc.Exec(ctx, "SELECT fencegate.fence('order:42', 36); SELECT 2").ReadAll()
	if err != nil || len(results) != 2 || string(results[0].Rows[0][0]) != "36" || string(results[1].Rows[0][0]) != "2" {
		t.Fatalf("results = %+v, %v", results, err)
	}
	if err := run("SELECT fencegate.fence('order:42', 30); UPDATE orders SET state = 'stale' WHERE id = 42"); sqlstate(err) != "FG001" {
		t.Fatalf("stale in implicit transaction: %v", err)
	}
	if err := run("UPDATE orders SET state = 'x' WHERE id = 42; SELECT fencegate.fence('order:42', 40)"); sqlstate(err) != "FG002" {
		t.Fatalf("write before fence: %v", err)
	}
	// A fence taken in one autocommit statement does not outlive it.
	if err := run("SELECT fencegate.fence('order:42', 40)"); err != nil {
		t.Fatalf("fence alone: %v", err)
	}
	if err := run("UPDATE orders SET state = 'x' WHERE id = 42"); sqlstate(err) != "FG002" {
		t.Fatalf("write after an autocommit fence: %v, want SQLSTATE FG002", err)
	}
	// Statements that switched enforcement off through the read-only
	// proxy change nothing now: the server is read-write and the checks
	// are PostgreSQL's.
	for _, q := range []string{"BEGIN READ WRITE; UPDATE orders SET state = 'x' WHERE id = 42; COMMIT",
		"SET default_transaction_read_only = off; UPDATE orders SET state = 'x' WHERE id = 42",
		"BEGIN; SELECT fencegate.fence('order:42', 41); COMMIT AND CHAIN; UPDATE orders SET state = 'chained' WHERE id = 42; COMMIT"} {
		if err := run(q); sqlstate(err) != "FG002" {
			t.Errorf("%q: %v, want SQLSTATE FG002", q, err)
		}
		_ = run("ROLLBACK")
	}
	if got, want := state(t, fx.admin, 42), "shipped"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	if got, want := mark(t, fx.admin, "order:42"), int64(41); got != want {
		t.Fatalf("mark = %d, want %d", got, want)
	}
}

func TestContractBatchAndPrepared(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	c := connect(t, fx.proxied)
	// A pipeline in autocommit is one implicit transaction.
	b := &pgx.Batch{}
	b.Queue("SELECT fencegate.fence($1, $2)", "order:42", 7)
	b.Queue("UPDATE orders SET state = $1 WHERE id = 42", "batched")
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("batch: %v", err)
	}
	b = &pgx.Batch{}
	b.Queue("SELECT fencegate.fence($1, $2)", "order:42", 6)
	b.Queue("UPDATE orders SET state = $1 WHERE id = 42", "stale")
	if err := c.SendBatch(ctx, b).Close(); sqlstate(err) != "FG001" {
		t.Fatalf("stale batch: %v", err)
	}
	// A batch inside a transaction.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b = &pgx.Batch{}
	b.Queue("SELECT fencegate.fence($1, $2)", "order:42", 8)
	b.Queue("UPDATE orders SET state = $1 WHERE id = 42", "batched-tx")
	b.Queue("SELECT state FROM orders WHERE id = 42")
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("batch in tx: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// An explicitly prepared statement, used in two transactions.
	if _, err := c.Prepare(ctx, "fence", "SELECT fencegate.fence($1, $2)"); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []int64{9, 10} {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		if err := tx.QueryRow(ctx, "fence", "order:42", tok).Scan(&got); err != nil || got != tok {
			t.Fatalf("prepared fence(%d) = %d, %v", tok, got, err)
		}
		if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'prepared' WHERE id = 42"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := state(t, fx.admin, 42), "prepared"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	if got, want := mark(t, fx.admin, "order:42"), int64(10); got != want {
		t.Fatalf("mark = %d, want %d", got, want)
	}
}

// A client that pipelines BEGIN and the fence (each with its own Sync, sent
// in one write) fences the transaction: the fence is not "alone", although
// the proxy sees the fence's batch before BEGIN's answer.
func TestPipelinedBeginThenFence(t *testing.T) {
	fx := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := connect(t, fx.proxied)
	p := c.PgConn().StartPipeline(ctx)
	p.SendQueryParams("BEGIN", nil, nil, nil, nil)
	p.SendPipelineSync()
	p.SendQueryParams("SELECT fencegate.fence($1, $2)", [][]byte{[]byte("order:42"), []byte("11")}, nil, nil, nil)
	p.SendPipelineSync()
	p.SendQueryParams("UPDATE orders SET state = 'pipelined' WHERE id = 42", nil, nil, nil, nil)
	p.SendQueryParams("COMMIT", nil, nil, nil, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		res, err := p.GetResults()
		if err != nil {
			t.Fatalf("result %d: %v", i, err)
		}
		if res == nil {
			break
		}
		if rr, ok := res.(*pgconn.ResultReader); ok {
			if _, err := rr.Close(); err != nil {
				t.Fatalf("result %d: %v", i, err)
			}
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := state(t, fx.admin, 42), "pipelined"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	if got, want := mark(t, fx.admin, "order:42"), int64(11); got != want {
		t.Fatalf("mark = %d, want %d", got, want)
	}
}
