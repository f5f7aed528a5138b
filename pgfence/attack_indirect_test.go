package pgfence_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Indirect attack routes: where attack_test.go goes at the fence and
// fencegate's own objects head-on, these go around them, through roles
// with rights beyond the documented grants, triggers of the application's
// own tables, transition-table and cascade gaps, the resource column
// itself, subtransactions, copied marks, privileges left to PUBLIC,
// concurrent holders and protocol-level sequences. They run like the
// others, on a fresh fixture, straight to PostgreSQL and through the gate,
// and end with the protected rows unchanged and no mark lowered.

// refusedAny fails unless err is an error; any SQLSTATE will do (a
// permission error, a syntax error: the route is closed either way).
func refusedAny(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want an error", what)
	}
}

// roleConn connects as user along the fixture's path, or returns the
// startup error.
func (f *fixture) roleConn(t *testing.T, user string) (*pgx.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgfencetest.WithUser(t, f.appDSN, user))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c, nil
}

// forgeAndLower is what a role that may write fencegate.marks does with
// it: it names its own transaction as the holder of order:1's fence and
// writes the row, then lowers the mark, and plants a mark for order:3.
func forgeAndLower(t *testing.T, c *pgx.Conn) {
	t.Helper()
	err := script(c, "BEGIN",
		"UPDATE fencegate.marks SET holder_xid = pg_current_xact_id(), holder_boot = pg_postmaster_start_time() WHERE resource = 'order:1'",
		"UPDATE shop.orders SET state = 'forged' WHERE id = 1", "COMMIT")
	if err == nil {
		t.Errorf("a forged holder in fencegate.marks let a write to order 1 commit")
	}
	if err := script(c, "UPDATE fencegate.marks SET token = 0 WHERE resource = 'order:1'"); err == nil {
		t.Errorf("the mark of order:1 was lowered by a plain UPDATE")
	}
	err = script(c, "BEGIN",
		"INSERT INTO fencegate.marks (resource, token, holder_xid, holder_boot) VALUES ('order:3', 0, pg_current_xact_id(), pg_postmaster_start_time())",
		"DELETE FROM shop.orders WHERE id = 3", "COMMIT")
	if err == nil {
		t.Errorf("a planted mark let a delete of order 3 commit")
	}
}

var indirectAttacks = []struct {
	name string
	run  func(t *testing.T, f *fixture)
}{
	{"pg_write_all_data through the gate", func(t *testing.T, f *fixture) {
		// A member of pg_write_all_data may INSERT, UPDATE and DELETE in
		// every table, fencegate.marks included: it can name its own
		// transaction as a fence's holder and lower any mark. Straight to
		// PostgreSQL it is trusted like a superuser; the gate must refuse it.
		if f.via != viaProxy {
			return
		}
		mustExec(t, f.admin, "SELECT fencegate.set_mark('order:1', 9, 'test')")
		etl := pgfencetest.Role(t, f.db.DSN, "fg_etl_", "LOGIN IN ROLE pg_write_all_data, "+f.db.App)
		c, err := f.roleConn(t, etl)
		if err != nil {
			expectErr(t, "startup as a member of pg_write_all_data", err, fencegate.CodePrivilegedRole)
			return
		}
		t.Errorf("the gate admitted %s, a member of pg_write_all_data", etl)
		forgeAndLower(t, c)
	}},
	{"other roles the gate must refuse", func(t *testing.T, f *fixture) {
		if f.via != viaProxy {
			return
		}
		for _, attrs := range []string{
			"LOGIN CREATEROLE",
			"LOGIN IN ROLE pg_execute_server_program",
			"LOGIN IN ROLE pg_write_server_files",
			"LOGIN IN ROLE " + f.db.Owner,
		} {
			user := pgfencetest.Role(t, f.db.DSN, "fg_priv_", attrs)
			c, err := f.roleConn(t, user)
			if err == nil {
				c.Close(context.Background())
				t.Fatalf("the gate admitted a role created with %s", attrs)
			}
			expectErr(t, "startup as a role created with "+attrs, err, fencegate.CodePrivilegedRole)
		}
		// The database's owner, where a protected table sits in schema
		// public (owned by pg_database_owner since PostgreSQL 15).
		dbOwner := pgfencetest.Role(t, f.db.DSN, "fg_dbowner_", "LOGIN")
		var dbName string
		if err := f.admin.QueryRow(context.Background(), "SELECT current_database()").Scan(&dbName); err != nil {
			t.Fatal(err)
		}
		mustExec(t, f.admin, fmt.Sprintf(`CREATE TABLE public.pub (id int); ALTER TABLE public.pub OWNER TO %s;
			SELECT fencegate.protect('public.pub', $$'pub:' || id$$);
			ALTER DATABASE %s OWNER TO %s`, f.data, dbName, dbOwner))
		t.Cleanup(func() {
			_, _ = f.admin.Exec(context.Background(), fmt.Sprintf("ALTER DATABASE %s OWNER TO CURRENT_USER", dbName))
		})
		c, err := f.roleConn(t, dbOwner)
		switch {
		case testutil.PostgresMajor(t) < 15:
			// Before 15, schema public belongs to the bootstrap superuser,
			// not to the database's owner, who then owns nothing the
			// checks rest on: admitted.
			if err != nil {
				t.Fatalf("the gate refused the owner of the database on PostgreSQL 14, where it owns nothing protected: %v", err)
			}
			c.Close(context.Background())
		case err == nil:
			c.Close(context.Background())
			t.Fatalf("the gate admitted the owner of the database, whose schema public holds a protected table")
		default:
			expectErr(t, "startup as the owner of the database", err, fencegate.CodePrivilegedRole)
		}
		// A member of the schema owner's role, by a grant made later.
		user := pgfencetest.Role(t, f.db.DSN, "fg_priv_", "LOGIN")
		mustExec(t, f.admin, fmt.Sprintf("GRANT %s TO %s", f.data, user))
		if c, err := f.roleConn(t, user); err == nil {
			c.Close(context.Background())
			t.Fatalf("the gate admitted a member of the owner of schema shop")
		} else {
			expectErr(t, "startup as a member of the owner of schema shop", err, fencegate.CodePrivilegedRole)
		}
	}},
	{"TRIGGER on a protected table: CREATE OR REPLACE TRIGGER over the checks", func(t *testing.T, f *fixture) {
		// CREATE OR REPLACE TRIGGER needs only the TRIGGER privilege on the
		// table, not its ownership: a role holding it replaces fencegate's
		// check triggers with a function of its own. The documented grants
		// leave TRIGGER out; the gate must refuse a role that has it, and
		// straight to PostgreSQL the DDL guard must refuse the replacement.
		ctx := context.Background()
		if f.via == direct {
			if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner, Grant: []string{f.db.App}, GuardDDL: true}); err != nil {
				t.Fatalf("install the DDL guard: %v", err)
			}
		}
		mustExec(t, f.admin, "SELECT fencegate.set_mark('order:1', 9, 'test')")
		user := pgfencetest.Role(t, f.db.DSN, "fg_trig_", "LOGIN IN ROLE "+f.db.App)
		mustExec(t, f.admin, "GRANT TRIGGER, TRUNCATE ON ALL TABLES IN SCHEMA shop TO "+user)
		c, err := f.roleConn(t, user)
		if err != nil {
			expectErr(t, "startup as a role with TRIGGER on protected tables", err, fencegate.CodePrivilegedRole)
			return
		}
		if f.via == viaProxy {
			t.Errorf("the gate admitted %s, which holds TRIGGER on the protected tables", user)
		}
		mustExec(t, c, "CREATE FUNCTION app.nothing() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$")
		for _, q := range []string{
			"CREATE OR REPLACE TRIGGER fencegate_upd AFTER UPDATE ON shop.orders FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
			"CREATE OR REPLACE TRIGGER fencegate_ins AFTER INSERT ON shop.orders FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
			"CREATE OR REPLACE TRIGGER fencegate_del AFTER DELETE ON shop.orders FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
			"CREATE OR REPLACE TRIGGER fencegate_trunc BEFORE TRUNCATE ON shop.ledger_2024 FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
			"CREATE OR REPLACE TRIGGER fencegate_ins AFTER INSERT ON shop.events_p0 FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
		} {
			_, err := c.Exec(ctx, q)
			if err == nil {
				t.Errorf("accepted: %s", q)
			}
		}
		for _, q := range []string{
			"UPDATE shop.orders SET state = 'replaced' WHERE id = 1",
			"INSERT INTO shop.orders VALUES (10, 1, 'replaced', 0)",
			"DELETE FROM shop.orders WHERE id = 7",
			"TRUNCATE shop.ledger_2024",
			"INSERT INTO shop.events_p0 VALUES (9, 9, 'replaced')",
		} {
			if _, err := c.Exec(ctx, q); err == nil {
				t.Errorf("accepted without a fence after the replacement: %s", q)
			}
		}
	}},
	{"TRIGGER held by a role reached with SET ROLE", func(t *testing.T, f *fixture) {
		// The same through a NOINHERIT member of a NOLOGIN role that holds
		// TRIGGER: has_table_privilege says the member has no TRIGGER, yet
		// SET ROLE gives it.
		if f.via != viaProxy {
			return
		}
		ctx := context.Background()
		holder := pgfencetest.Role(t, f.db.DSN, "fg_trigholder_", "NOLOGIN IN ROLE "+f.db.App)
		mustExec(t, f.admin, "GRANT TRIGGER ON ALL TABLES IN SCHEMA shop TO "+holder)
		user := pgfencetest.Role(t, f.db.DSN, "fg_noinherit_", "LOGIN NOINHERIT IN ROLE "+holder)
		c, err := f.roleConn(t, user)
		if err != nil {
			expectErr(t, "startup as a member of a role with TRIGGER on protected tables", err, fencegate.CodePrivilegedRole)
			return
		}
		t.Errorf("the gate admitted %s, a member of %s, which holds TRIGGER on the protected tables", user, holder)
		for _, q := range []string{
			"SET ROLE " + holder,
			"CREATE FUNCTION app.nothing() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$",
			"CREATE OR REPLACE TRIGGER fencegate_upd AFTER UPDATE ON shop.orders FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
			"UPDATE shop.orders SET state = 'set role' WHERE id = 1",
		} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Logf("%s: %v", q, err)
				return
			}
		}
	}},
	{"a function of the application in a protected table's index", func(t *testing.T, f *fixture) {
		// The table's owner indexed an expression over a function the
		// application role owns. ANALYZE (autovacuum's, after enough
		// fenced writes, or an administrator's) evaluates index
		// expressions as the table's owner: the application's function
		// then runs with the owner's rights. Straight to PostgreSQL the
		// owner of such a function is trusted like the owner of a column's
		// type; the gate must refuse it.
		if f.via != viaProxy {
			return
		}
		ctx := context.Background()
		mustExec(t, f.app, "CREATE FUNCTION app.norm(text) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT lower($1)'; GRANT USAGE ON SCHEMA app TO "+f.data)
		mustExec(t, f.admin, fmt.Sprintf("SET ROLE %s; CREATE INDEX orders_norm ON shop.orders (app.norm(state)); RESET ROLE", f.data))
		// The gate trusts a role check that passed for its CheckInterval
		// (1s by default), and the fixture's own connection passed one
		// just now: a session opened after that is checked again.
		time.Sleep(proxy.DefaultCheckInterval + 100*time.Millisecond)
		c, err := f.roleConn(t, f.db.App)
		if err != nil {
			expectErr(t, "startup as the owner of a function in a protected table's index", err, fencegate.CodePrivilegedRole)
			return
		}
		t.Errorf("the gate admitted %s, which owns a function that an index of shop.orders calls", f.db.App)
		mustExec(t, c, fmt.Sprintf(`CREATE FUNCTION app.evil() RETURNS void LANGUAGE plpgsql VOLATILE AS $$
			BEGIN
				IF current_user <> %[1]s THEN
					EXECUTE 'GRANT TRIGGER ON shop.orders TO %[2]s';
					EXECUTE 'ALTER TABLE shop.events_p0 DISABLE TRIGGER fencegate_ins';
				END IF;
			END$$;
			CREATE OR REPLACE FUNCTION app.norm(text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$BEGIN PERFORM app.evil(); RETURN lower($1); END$$;
			CREATE FUNCTION app.nothing() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$`, "'"+f.db.App+"'", f.db.App))
		mustExec(t, f.admin, "ANALYZE shop.orders")
		for _, q := range []string{
			"INSERT INTO shop.events_p0 VALUES (9, 9, 'analyze')",
			"CREATE OR REPLACE TRIGGER fencegate_upd AFTER UPDATE ON shop.orders FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
			"UPDATE shop.orders SET state = 'analyze' WHERE id = 1",
		} {
			if _, err := c.Exec(ctx, q); err == nil {
				t.Errorf("accepted: %s", q)
			}
		}
	}},
	{"rights beyond the grants that switch nothing off", func(t *testing.T, f *fixture) {
		// SET on session_replication_role, REFERENCES on the protected
		// tables, CREATE on their schema: none of these is among the
		// documented grants, and none gets a write past the checks.
		mustExec(t, f.admin, fmt.Sprintf(`GRANT REFERENCES ON ALL TABLES IN SCHEMA shop TO %[1]s;
			GRANT CREATE ON SCHEMA shop TO %[1]s`, f.db.App))
		// Parameter privileges are 15's: before, only a superuser may set
		// session_replication_role, and the route does not exist.
		modes := []string{"replica", "local"}
		if testutil.PostgresMajor(t) >= 15 {
			mustExec(t, f.admin, "GRANT SET ON PARAMETER session_replication_role TO "+f.db.App)
		} else {
			modes = nil
		}
		c := f.appConn(t)
		for _, mode := range modes {
			mustExec(t, c, "SET session_replication_role = "+mode)
			for _, q := range []string{
				"UPDATE shop.orders SET state = 'srr' WHERE id = 1",
				"INSERT INTO shop.events_p0 VALUES (9, 9, 'srr')",
				"INSERT INTO shop.ledger_2024 VALUES (9, 9, 9)",
				"DELETE FROM shop.orders WHERE id = 4",
				"UPDATE shop.orders SET id = 97 WHERE id = 2",
			} {
				err := script(c, "BEGIN", "SELECT fencegate.fence('order:2', 1)", q, "COMMIT")
				expectErr(t, mode+": "+q, err, fencegate.CodeUnfenced)
			}
		}
		if modes != nil {
			mustExec(t, c, "SET session_replication_role = origin")
		}
		mustExec(t, c, `CREATE TABLE app.ref (o int REFERENCES shop.orders ON UPDATE CASCADE ON DELETE CASCADE);
			CREATE TABLE shop.orders_shadow (LIKE shop.orders);
			CREATE FUNCTION app.nothing() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$`)
		for _, q := range []string{
			"CREATE TRIGGER a_first AFTER UPDATE ON shop.orders FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
			"CREATE OR REPLACE TRIGGER fencegate_upd AFTER UPDATE ON shop.orders FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
			"ALTER TABLE shop.orders DISABLE TRIGGER fencegate_upd",
			"ALTER TABLE shop.orders ENABLE REPLICA TRIGGER fencegate_upd",
			"ALTER TRIGGER fencegate_upd ON shop.orders RENAME TO zz",
			"DROP TRIGGER fencegate_upd ON shop.orders",
			"ALTER TABLE shop.orders RENAME TO orders_old",
			"CREATE TABLE shop.orders_kid () INHERITS (shop.orders)",
			"ALTER TABLE shop.orders_shadow INHERIT shop.orders",
			"ALTER TABLE shop.events ATTACH PARTITION shop.orders_shadow FOR VALUES FROM (300) TO (400)",
		} {
			_, err := c.Exec(context.Background(), q)
			refusedAny(t, q, err)
		}
		err := script(c, "BEGIN", "SELECT fencegate.fence('order:2', 1)", "UPDATE shop.orders SET state = 'after' WHERE id = 1", "COMMIT")
		expectErr(t, "write after the attempts", err, fencegate.CodeUnfenced)
	}},
	{"triggers of the application's own tables", func(t *testing.T, f *fixture) {
		mustExec(t, f.app, `CREATE TABLE app.src (i int);
			CREATE TABLE app.deep (n int);
			CREATE FUNCTION app.before_row() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN UPDATE shop.orders SET state = 'before' WHERE id = 1; RETURN NEW; END$$;
			CREATE FUNCTION app.stmt() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN UPDATE shop.orders SET state = 'stmt' WHERE id IN (SELECT i FROM nt); RETURN NULL; END$$;
			CREATE FUNCTION app.deferred() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN INSERT INTO shop.orders VALUES (80 + NEW.i, 1, 'deferred', 0); RETURN NULL; END$$;
			CREATE FUNCTION app.reenter() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					IF NEW.n < 5 THEN INSERT INTO app.deep VALUES (NEW.n + 1);
					ELSE DELETE FROM shop.orders WHERE id = 5; END IF;
					RETURN NEW;
				END$$;
			CREATE TRIGGER a BEFORE INSERT ON app.src FOR EACH ROW WHEN (NEW.i = 1) EXECUTE FUNCTION app.before_row();
			CREATE TRIGGER b AFTER INSERT ON app.src REFERENCING NEW TABLE AS nt FOR EACH STATEMENT EXECUTE FUNCTION app.stmt();
			CREATE CONSTRAINT TRIGGER c AFTER INSERT ON app.src DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION app.deferred();
			CREATE TRIGGER d AFTER INSERT ON app.deep FOR EACH ROW EXECUTE FUNCTION app.reenter()`)
		for _, q := range []string{"INSERT INTO app.src VALUES (1)", "INSERT INTO app.src VALUES (2)", "INSERT INTO app.deep VALUES (0)"} {
			err := script(f.app, "BEGIN", "SELECT fencegate.fence('order:4', 1)", q, "COMMIT")
			expectErr(t, q, err, fencegate.CodeUnfenced)
		}
		// The deferred trigger alone, with the statement trigger out of
		// the way: the write happens at COMMIT, after the fence on
		// another resource.
		mustExec(t, f.app, "DROP TRIGGER a ON app.src; DROP TRIGGER b ON app.src")
		err := script(f.app, "BEGIN", "SELECT fencegate.fence('order:4', 1)", "INSERT INTO app.src VALUES (3)", "COMMIT")
		expectErr(t, "deferred constraint trigger", err, fencegate.CodeUnfenced)
		err = script(f.app, "BEGIN", "SET CONSTRAINTS ALL IMMEDIATE", "SELECT fencegate.fence('order:4', 1)", "INSERT INTO app.src VALUES (3)", "COMMIT")
		expectErr(t, "constraint trigger made immediate", err, fencegate.CodeUnfenced)
		// A fence taken in the deferred trigger's own transaction, but
		// undone by a savepoint before COMMIT.
		err = script(f.app, "BEGIN", "INSERT INTO app.src VALUES (3)", "SAVEPOINT s", "SELECT fencegate.fence('order:83', 1)",
			"ROLLBACK TO SAVEPOINT s", "COMMIT")
		expectErr(t, "deferred trigger after a fence rolled back", err, fencegate.CodeUnfenced)
	}},
	{"statements that write a table twice", func(t *testing.T, f *fixture) {
		// Transition tables are shared by every part of a statement that
		// writes the same table; each of these writes order 1 (or moves a
		// row onto an unfenced resource) beside a fenced write.
		for _, q := range testutil.WithoutMerge(t, []string{
			"WITH a AS (UPDATE shop.orders SET state = 'a' WHERE id = 2 RETURNING 1), b AS (UPDATE shop.orders SET state = 'b' WHERE id = 1 RETURNING 1) SELECT * FROM a, b",
			"WITH a AS (INSERT INTO shop.orders VALUES (10, 1, 'n', 1) RETURNING 1) UPDATE shop.orders SET state = 'cte' WHERE id = 1",
			"WITH a AS (INSERT INTO shop.orders VALUES (10, 1, 'n', 1) ON CONFLICT (id) DO UPDATE SET state = 'x' RETURNING 1) INSERT INTO shop.orders VALUES (1, 1, 'up', 1) ON CONFLICT (id) DO UPDATE SET state = 'up'",
			"WITH a AS (DELETE FROM shop.orders WHERE id = 1 RETURNING *) INSERT INTO shop.orders SELECT 10, customer, state, amount FROM a",
			"WITH a AS (DELETE FROM shop.orders WHERE id = 10 RETURNING *) DELETE FROM shop.orders WHERE id = 1",
			"WITH a AS (UPDATE shop.orders SET state = 'a' WHERE id = 10 RETURNING 1) DELETE FROM shop.lines WHERE order_id = 1",
			"MERGE INTO shop.orders o USING (VALUES (1), (10)) v(id) ON o.id = v.id WHEN MATCHED AND o.id = 1 THEN DELETE WHEN MATCHED THEN UPDATE SET state = 'm' WHEN NOT MATCHED THEN INSERT VALUES (v.id, 1, 'm', 0)",
			"MERGE INTO shop.orders o USING (VALUES (5, 10), (3, 11)) v(id, nid) ON o.id = v.id WHEN MATCHED AND v.id = 3 THEN DO NOTHING WHEN MATCHED THEN UPDATE SET id = v.nid",
			"MERGE INTO shop.orders o USING (SELECT 10 AS id UNION ALL SELECT 1) v ON o.id = v.id WHEN NOT MATCHED THEN INSERT VALUES (v.id, 1, 'm', 0) WHEN MATCHED THEN UPDATE SET state = 'm2'",
			"INSERT INTO shop.orders VALUES (10, 1, 'n', 0), (1, 1, 'n', 0) ON CONFLICT (id) DO UPDATE SET state = 'both'",
			"INSERT INTO shop.orders VALUES (2, 1, 'n', 0) ON CONFLICT (id) DO UPDATE SET id = 12",
			"INSERT INTO shop.orders VALUES (3, 1, 'n', 0) ON CONFLICT (id) DO UPDATE SET id = 13",
			"UPDATE shop.orders o SET state = o.state || v.s FROM (VALUES (10, 'x'), (1, 'y'), (1, 'z')) v(id, s) WHERE o.id = v.id",
			"UPDATE shop.orders o SET id = o.id + 9 FROM (VALUES (3), (3)) v(id) WHERE o.id = v.id",
			"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) UPDATE shop.orders SET state = 'rec' WHERE id IN (SELECT n * 10 FROM r) OR id = 1",
		}) {
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
				ctx := context.Background()
				tx, err := f.app.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:10', 1), fencegate.fence('order:11', 1), fencegate.fence('order:2', 1)"); err != nil {
					t.Fatal(err)
				}
				if _, err = tx.Exec(ctx, q, mode); err == nil {
					err = tx.Commit(ctx)
				}
				_ = tx.Rollback(ctx)
				expectErr(t, q, err, fencegate.CodeUnfenced)
			}
		}
	}},
	{"writes wrapped in COPY TO, EXPLAIN, PREPARE and SQL functions", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		mustExec(t, f.app, `CREATE FUNCTION app.upd() RETURNS SETOF int LANGUAGE sql AS $$UPDATE shop.orders SET state = 'fn' WHERE id IN (1, 2) RETURNING id$$;
			CREATE FUNCTION app.cte() RETURNS SETOF int LANGUAGE sql AS $$WITH u AS (UPDATE shop.orders SET state = 'fn' WHERE id IN (1, 2) RETURNING id) SELECT id FROM u$$`)
		tx, err := f.app.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, tx.Conn(), "SELECT fencegate.fence('order:2', 1)")
		_, err = tx.Conn().PgConn().CopyTo(ctx, io.Discard, "COPY (UPDATE shop.orders SET state = 'copyto' WHERE id IN (1, 2) RETURNING *) TO STDOUT")
		if err == nil {
			err = tx.Commit(ctx)
		}
		_ = tx.Rollback(ctx)
		expectErr(t, "COPY (UPDATE ... RETURNING) TO STDOUT", err, fencegate.CodeUnfenced)
		for _, q := range [][]string{
			{"EXPLAIN (ANALYZE, COSTS OFF) UPDATE shop.orders SET state = 'explain' WHERE id IN (1, 2)"},
			{"PREPARE w AS UPDATE shop.orders SET state = $1 WHERE id IN (1, 2)", "EXECUTE w('prepared')"},
			{"SELECT * FROM app.upd() LIMIT 1"},
			{"SELECT * FROM app.cte() LIMIT 1"},
			{"SELECT 1 FROM generate_series(1, 3) g WHERE g = 0 OR EXISTS (SELECT app.upd()) LIMIT 1"},
		} {
			err := script(f.app, append(append([]string{"BEGIN", "SELECT fencegate.fence('order:2', 1)"}, q...), "COMMIT")...)
			expectErr(t, strings.Join(q, "; "), err, fencegate.CodeUnfenced)
			_, _ = f.app.Exec(ctx, "DEALLOCATE ALL")
		}
		// A cursor over a function that writes: the function's UPDATE is a
		// statement of its own, checked when it ends, inside the FETCH.
		err = script(f.app, "BEGIN", "SELECT fencegate.fence('order:2', 1)",
			"DECLARE c CURSOR FOR SELECT app.upd() UNION ALL SELECT 1 / (g - 2) FROM generate_series(1, 3) g",
			"FETCH 1 FROM c", "COMMIT")
		expectErr(t, "cursor over a writing function", err, fencegate.CodeUnfenced)
	}},
	{"rows moved between partitions and resources", func(t *testing.T, f *fixture) {
		for _, c := range []struct {
			fence []string
			q     string
		}{
			{[]string{"acct:150"}, "UPDATE shop.events SET account = 150 WHERE id = 1"},                     // unfenced source
			{[]string{"acct:5"}, "UPDATE shop.events SET account = 150 WHERE id = 1"},                       // unfenced target
			{[]string{"acct:150"}, "UPDATE shop.events_p1 SET id = id + 1, account = 151 WHERE id = 100"},   // hash move, unfenced target
			{[]string{"acct:151"}, "UPDATE shop.events_p1 SET id = id + 1, account = 151 WHERE id = 100"},   // hash move, unfenced source
			{[]string{"acct:5", "acct:50"}, "UPDATE shop.events SET account = 100 - account WHERE id <= 2"}, // swap onto 95 and 50
			{[]string{"acct:5"}, "WITH m AS (UPDATE shop.events SET account = 50 WHERE id = 1 RETURNING 1) DELETE FROM shop.events_p0 WHERE id = 2"},
			{[]string{"acct:7", "acct:8"}, "UPDATE shop.ledger SET acct = 9 WHERE id = 2"},
			{[]string{"acct:9"}, "UPDATE shop.ledger SET acct = 9 WHERE id = 2"},
			{[]string{"acct:7"}, "UPDATE ONLY shop.ledger SET acct = acct WHERE true; UPDATE shop.ledger SET amt = 0"},
		} {
			err := attempt(context.Background(), f.app, c.fence, strings.Split(c.q, "; "), true)
			expectErr(t, c.q, err, fencegate.CodeUnfenced)
		}
	}},
	{"MERGE moving a row across partitions", func(t *testing.T, f *fixture) {
		testutil.NeedMajor(t, 15, "MERGE")
		// A MERGE whose UPDATE action moves a row to another partition:
		// PostgreSQL carries the move out as a DELETE from the old leaf and
		// an INSERT into the new one. The same move by a plain UPDATE is
		// refused (see "rows moved between partitions and resources").
		ctx := context.Background()
		for i, c := range []struct {
			fence []string
			q     string
		}{
			{nil, "MERGE INTO shop.events e USING (VALUES (2)) v(id) ON e.id = v.id WHEN MATCHED THEN UPDATE SET account = 153"},
			{[]string{"acct:5"}, "MERGE INTO shop.events e USING (VALUES (1)) v(id) ON e.id = v.id WHEN MATCHED THEN UPDATE SET account = 150"},
			{[]string{"acct:150"}, "MERGE INTO shop.events e USING (VALUES (1)) v(id) ON e.id = v.id WHEN MATCHED THEN UPDATE SET account = 150"},
			{nil, "MERGE INTO shop.events e USING (VALUES (100)) v(id) ON e.id = v.id WHEN MATCHED THEN UPDATE SET account = 7"},
			{nil, "MERGE INTO shop.events_p1 e USING (VALUES (100)) v(id) ON e.id = v.id WHEN MATCHED THEN UPDATE SET id = 101"},
			{[]string{"acct:60"}, "MERGE INTO shop.events e USING (VALUES (1), (600)) v(id) ON e.id = v.id WHEN MATCHED THEN UPDATE SET account = 160 WHEN NOT MATCHED THEN INSERT VALUES (v.id, 60, 'm')"},
			{[]string{"acct:5"}, "MERGE INTO shop.events e USING (VALUES (1), (2)) v(id) ON e.id = v.id WHEN MATCHED AND e.id = 2 THEN DELETE WHEN MATCHED THEN UPDATE SET account = 150"},
		} {
			// Every variant but the first is rolled back by the test
			// after its statement, so that each starts from the fixture's
			// rows; the first commits to show the row really moves.
			before := f.dataSnapshot(t)
			err := attempt(ctx, f.app, c.fence, []string{c.q}, i == 0)
			if after := f.dataSnapshot(t); after != before {
				t.Errorf("committed with fences %q: %s\nbefore:\n%s\nafter:\n%s", c.fence, c.q, before, after)
			} else if sqlstate(err) != fencegate.CodeUnfenced {
				t.Errorf("accepted with fences %q (rolled back by the test): %s: %v, want FG002", c.fence, c.q, err)
			}
		}
	}},
	{"an inheritance child added later, written through its parent", func(t *testing.T, f *fixture) {
		// The parent's owner adds a child after protect ran, without the
		// DDL guard. Adding a table is the owner's act, and the owner is
		// trusted (it could as well drop the checks): until protect or
		// Install runs again, the child's rows are unchecked, straight and
		// through the parent (an UPDATE through the parent is checked row
		// by row, and the parent's row trigger fires only for the
		// parent's own rows). What must hold: HealthQuery names the child
		// at once (so the gate refuses every session meanwhile), and once
		// Install repairs it every write through the parent is refused.
		ctx := context.Background()
		mustExec(t, f.admin, fmt.Sprintf(`SET ROLE %s; CREATE TABLE shop.ledger_2025 () INHERITS (shop.ledger);
			INSERT INTO shop.ledger_2025 VALUES (3, 99, 300); RESET ROLE`, f.data))
		if got := health(t, f.admin); !strings.Contains(strings.Join(got, "\n"), "shop.ledger_2025") {
			t.Fatalf("HealthQuery with a late child = %q, want it named", got)
		}
		if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner}); err != nil {
			t.Fatal(err)
		}
		if got := health(t, f.admin); len(got) != 0 {
			t.Fatalf("HealthQuery after Install = %q", got)
		}
		row := func() string {
			var s string
			if err := f.admin.QueryRow(ctx, "SELECT coalesce(string_agg(l::text, ';'), 'none') FROM shop.ledger_2025 l").Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		before := row()
		for _, q := range []string{
			"UPDATE shop.ledger SET amt = 0 WHERE id = 3",
			"WITH u AS (UPDATE shop.ledger SET amt = amt + 1 WHERE id = 3 RETURNING 1) SELECT count(*) FROM u",
			"DELETE FROM shop.ledger WHERE id = 3",
			"UPDATE shop.ledger SET acct = 7 WHERE id = 3",
		} {
			err := attempt(ctx, f.app, []string{"acct:7"}, []string{q}, true)
			if after := row(); after != before {
				t.Errorf("%s: the child's row changed from %s to %s (error %v)", q, before, after, err)
				before = after
			} else if sqlstate(err) != fencegate.CodeUnfenced {
				t.Errorf("%s: %v, want FG002", q, err)
			}
		}
		mustExec(t, f.admin, fmt.Sprintf("SET ROLE %s; DROP TABLE shop.ledger_2025; RESET ROLE", f.data))
	}},
	{"foreign-key cascades onto another resource", func(t *testing.T, f *fixture) {
		// Deleting order 4 sets note 1's order_id to NULL: note:1 is written.
		// Updating order 2's id cascades into its lines: both resources.
		for _, c := range []struct {
			fence []string
			q     string
		}{
			{[]string{"order:4"}, "DELETE FROM shop.orders WHERE id = 4"},
			{[]string{"order:2"}, "UPDATE shop.orders SET id = 98 WHERE id = 2"},
			{[]string{"order:98"}, "UPDATE shop.orders SET id = 98 WHERE id = 2"},
			{[]string{"order:1", "order:2", "order:3", "order:4", "order:5"}, "DELETE FROM shop.customers WHERE id = 1"},
			{[]string{"order:6", "order:7"}, "UPDATE shop.orders SET id = id WHERE id = 1"},
			{[]string{"order:1"}, "UPDATE shop.lines SET order_id = 4 WHERE order_id = 1"},
		} {
			err := attempt(context.Background(), f.app, c.fence, []string{c.q}, true)
			expectErr(t, c.q, err, fencegate.CodeUnfenced)
		}
	}},
	{"writing the resource column itself", func(t *testing.T, f *fixture) {
		for _, q := range []string{
			"INSERT INTO shop.orders (id, customer, state, amount, fencegate_resource) VALUES (10, 1, 'g', 0, 'order:2')",
			"INSERT INTO shop.orders OVERRIDING SYSTEM VALUE VALUES (10, 1, 'g', 0, 'order:2')",
			"INSERT INTO shop.orders OVERRIDING USER VALUE VALUES (10, 1, 'g', 0, 'order:2')",
			"UPDATE shop.orders SET fencegate_resource = 'order:2' WHERE id = 1",
			"UPDATE shop.orders SET (state, fencegate_resource) = ('g', 'order:2') WHERE id = 1",
			"INSERT INTO shop.orders SELECT * FROM shop.orders WHERE id = 1 ON CONFLICT (id) DO UPDATE SET state = 'g'",
			"COPY shop.orders (id, customer, state, amount, fencegate_resource) FROM STDIN\n10\t1\tg\t0\torder:2",
			"COPY shop.orders FROM STDIN\n10\t1\tg\t0\torder:2",
			"COPY shop.orders FROM STDIN WITH (FREEZE)\n10\t1\tg\t0",
			"ALTER TABLE shop.orders ALTER COLUMN fencegate_resource DROP EXPRESSION",
			"ALTER TABLE shop.orders ALTER COLUMN fencegate_resource SET DEFAULT 'order:2'",
		} {
			err := attempt(context.Background(), f.app, []string{"order:2"}, []string{q}, true)
			refusedAny(t, q, err)
		}
		// A row whose resource is NULL is refused, fenced or not.
		err := attempt(context.Background(), f.app, []string{"acct:"}, []string{"INSERT INTO shop.ledger VALUES (5, NULL, 1)"}, true)
		expectErr(t, "a row without a resource", err, fencegate.CodeMisuse)
		err = attempt(context.Background(), f.app, []string{"acct:7"}, []string{"UPDATE shop.ledger SET acct = NULL WHERE id = 1"}, true)
		expectErr(t, "a row losing its resource", err, fencegate.CodeMisuse)
	}},
	{"objects named like the check's in pg_temp and search_path", func(t *testing.T, f *fixture) {
		// The checks read the transition tables fg_new and fg_old and
		// fencegate.marks: a temporary table of those names, first in the
		// session's search_path, must not be what they read.
		c := f.appConn(t)
		mustExec(t, c, `CREATE TEMP TABLE fg_new (fencegate_resource text);
			CREATE TEMP TABLE fg_old (fencegate_resource text);
			CREATE TEMP TABLE marks (resource text, token bigint, updated_at timestamptz, holder_xid xid8, holder_boot timestamptz);
			CREATE TEMP TABLE protected (tbl regclass, resource text);
			CREATE TABLE app.marks (resource text, token bigint, updated_at timestamptz, holder_xid xid8, holder_boot timestamptz);
			INSERT INTO fg_new VALUES ('order:2'); INSERT INTO fg_old VALUES ('order:2')`)
		for _, path := range []string{"pg_temp, app, pg_catalog, fencegate", "app, pg_temp, fencegate, pg_catalog", "fencegate, app"} {
			mustExec(t, c, "SET search_path = "+path)
			err := script(c, "BEGIN",
				"INSERT INTO pg_temp.marks VALUES ('order:1', 99, now(), pg_current_xact_id(), pg_postmaster_start_time())",
				"INSERT INTO app.marks SELECT * FROM pg_temp.marks",
				"SELECT fencegate.fence('order:2', 1)",
				"UPDATE shop.orders SET state = 'temp' WHERE id = 1", "COMMIT")
			expectErr(t, "write with shadows under search_path "+path, err, fencegate.CodeUnfenced)
			err = script(c, "BEGIN",
				"INSERT INTO pg_temp.marks VALUES ('order:10', 99, now(), pg_current_xact_id(), pg_postmaster_start_time())",
				"INSERT INTO shop.orders VALUES (10, 1, 'temp', 0)", "COMMIT")
			expectErr(t, "insert with shadows under search_path "+path, err, fencegate.CodeUnfenced)
		}
	}},
	{"operators for every type the check compares, and forged settings", func(t *testing.T, f *fixture) {
		// A check that compared holder columns or resources through
		// operators found on the session's search_path, or trusted a
		// setting the session can write, would take these.
		c := f.appConn(t)
		mustExec(t, c, `CREATE FUNCTION app.yes(xid8, xid8) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
			CREATE FUNCTION app.yes(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
			CREATE FUNCTION app.yes(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
			CREATE FUNCTION app.no(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false';
			CREATE OPERATOR app.= (LEFTARG = xid8, RIGHTARG = xid8, FUNCTION = app.yes);
			CREATE OPERATOR app.= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = app.yes);
			CREATE OPERATOR app.= (LEFTARG = text, RIGHTARG = text, FUNCTION = app.yes);
			CREATE OPERATOR app.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = app.no);
			CREATE FUNCTION app.pg_current_xact_id() RETURNS xid8 LANGUAGE sql AS 'SELECT ''3''::xid8';
			CREATE FUNCTION app.coalesce(text, text) RETURNS text LANGUAGE sql AS 'SELECT ''order:2''::text';
			CREATE FUNCTION app.current_setting(text, boolean) RETURNS text LANGUAGE sql AS 'SELECT ''on''::text';
			CREATE FUNCTION app.pg_trigger_depth() RETURNS integer LANGUAGE sql AS 'SELECT 1'`)
		rows, err := f.admin.Query(context.Background(), "SELECT DISTINCT name FROM pg_settings WHERE name LIKE 'fencegate.%'")
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range append(names, "fencegate.holder", "fencegate.fenced", "fencegate.resources", "fencegate.xid", "fencegate.checked", "fencegate.skip", "fencegate.bypass") {
			for _, v := range []string{"order:1", "on", "true", "1", "*"} {
				_, _ = c.Exec(context.Background(), fmt.Sprintf("SELECT set_config(%s, %s, false)", quoteLit(g), quoteLit(v)))
			}
		}
		for _, path := range []string{"app, pg_catalog", "app, pg_temp, pg_catalog"} {
			mustExec(t, c, "SET search_path = "+path)
			for _, q := range []string{
				"UPDATE shop.orders SET state = 'op' WHERE id = 1",
				"INSERT INTO shop.orders VALUES (10, 1, 'op', 0)",
				"DELETE FROM shop.orders WHERE id = 7",
				"UPDATE shop.orders SET id = 11 WHERE id = 2",
				"INSERT INTO shop.events_p0 VALUES (9, 9, 'op')",
				"UPDATE shop.events SET account = 60 WHERE id = 1",
			} {
				err := script(c, "BEGIN", "SELECT fencegate.fence('order:2', 1)", q, "COMMIT")
				expectErr(t, path+": "+q, err, fencegate.CodeUnfenced)
			}
		}
	}},
	{"fences undone inside functions and subtransactions", func(t *testing.T, f *fixture) {
		mustExec(t, f.app, `CREATE FUNCTION app.try_fence(r text) RETURNS void LANGUAGE plpgsql AS $$
			BEGIN
				BEGIN
					PERFORM fencegate.fence(r, 1);
					PERFORM 1 / 0;
				EXCEPTION WHEN division_by_zero THEN NULL;
				END;
			END$$;
			CREATE FUNCTION app.xids() RETURNS text LANGUAGE plpgsql AS $$
				DECLARE top xid8 := pg_current_xact_id(); sub xid8;
				BEGIN
					BEGIN sub := pg_current_xact_id(); PERFORM 1 / 0; EXCEPTION WHEN division_by_zero THEN NULL; END;
					RETURN top::text || ' ' || sub::text;
				END$$`)
		for _, stmts := range [][]string{
			{"BEGIN", "SELECT app.try_fence('order:1')", "UPDATE shop.orders SET state = 'exc' WHERE id = 1", "COMMIT"},
			{"BEGIN", "SAVEPOINT a", "SAVEPOINT b", "SELECT fencegate.fence('order:1', 1)", "RELEASE SAVEPOINT b", "ROLLBACK TO SAVEPOINT a",
				"UPDATE shop.orders SET state = 'released' WHERE id = 1", "COMMIT"},
			{"BEGIN", "SAVEPOINT a", "SELECT fencegate.fence('order:1', 1)", "UPDATE shop.orders SET state = 'inner' WHERE id = 1",
				"ROLLBACK TO SAVEPOINT a", "UPDATE shop.orders SET state = 'outer' WHERE id = 2", "COMMIT"},
			{"BEGIN", "SELECT fencegate.fence('order:2', 1)", "SAVEPOINT a", "SELECT fencegate.fence('order:1', 1)", "ROLLBACK TO SAVEPOINT a",
				"UPDATE shop.orders SET state = 'x' WHERE id IN (1, 2)", "COMMIT"},
			{"BEGIN", "DO $$BEGIN BEGIN PERFORM fencegate.fence('order:1', 1); RAISE EXCEPTION 'x'; EXCEPTION WHEN OTHERS THEN NULL; END; UPDATE shop.orders SET state = 'do' WHERE id = 1; END$$", "COMMIT"},
		} {
			err := script(f.app, stmts...)
			expectErr(t, strings.Join(stmts, "; "), err, "")
			if c := sqlstate(err); c != fencegate.CodeUnfenced && c != "P0001" {
				t.Fatalf("%s: %v, want FG002", strings.Join(stmts, "; "), err)
			}
		}
		// pg_current_xact_id names the top-level transaction, in a
		// subtransaction too: a fence there is the transaction's.
		var xids string
		if err := f.app.QueryRow(context.Background(), "SELECT app.xids()").Scan(&xids); err != nil {
			t.Fatal(err)
		}
		if top, sub, _ := strings.Cut(xids, " "); top != sub {
			t.Fatalf("pg_current_xact_id in a subtransaction = %s, top level %s", sub, top)
		}
	}},
	{"a mark copied from another database of this server", func(t *testing.T, f *fixture) {
		// holder_boot is the same for every database of a server; the
		// transaction id is not: a mark naming a transaction of another
		// database never names one of this database.
		other := pgfencetest.New(t)
		oc := other.AppConn(t)
		ctx := context.Background()
		otx, err := oc.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer otx.Rollback(ctx) //nolint:errcheck
		if _, err := otx.Exec(ctx, "SELECT fencegate.fence('order:1', 1)"); err != nil {
			t.Fatal(err)
		}
		var xid, boot string
		if err := otx.QueryRow(ctx, "SELECT holder_xid::text, holder_boot::text FROM fencegate.marks WHERE resource = 'order:1'").Scan(&xid, &boot); err != nil {
			t.Fatal(err)
		}
		mustExec(t, f.admin, "INSERT INTO fencegate.marks (resource, token, holder_xid, holder_boot) VALUES ('order:1', 1, $1::xid8, $2::timestamptz)", xid, boot)
		err = script(f.app, "BEGIN", "UPDATE shop.orders SET state = 'copied' WHERE id = 1", "COMMIT")
		expectErr(t, "write under a mark copied from another database", err, fencegate.CodeUnfenced)
		// Transaction ids are the server's, not the database's: this
		// database never hands out the copied one.
		var mine string
		if err := f.app.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&mine); err != nil {
			t.Fatal(err)
		}
		if mine == xid {
			t.Fatalf("two databases of one server handed out transaction id %s twice", xid)
		}
	}},
	{"privileges left to PUBLIC or to the application", func(t *testing.T, f *fixture) {
		// Nothing of schema fencegate but the three fence functions and
		// effect is
		// executable by the application role or a role without any grant,
		// and no table or sequence of it is writable by them, even after
		// the application tried default privileges and an upgrade ran.
		ctx := context.Background()
		for _, q := range []string{
			"ALTER DEFAULT PRIVILEGES IN SCHEMA fencegate GRANT ALL ON TABLES TO PUBLIC",
			"ALTER DEFAULT PRIVILEGES IN SCHEMA fencegate GRANT ALL ON FUNCTIONS TO PUBLIC",
			"ALTER DEFAULT PRIVILEGES FOR ROLE " + f.db.Owner + " GRANT ALL ON TABLES TO PUBLIC",
			"ALTER DEFAULT PRIVILEGES FOR ROLE " + f.data + " GRANT ALL ON TABLES TO PUBLIC",
			"GRANT ALL ON fencegate.marks TO PUBLIC",
			"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA fencegate TO PUBLIC",
			"CREATE STATISTICS app.s ON id, customer FROM shop.orders",
			"CREATE INDEX ON shop.orders ((app_fn(id)))",
			"COMMENT ON TABLE shop.orders IS 'mine'",
			"SECURITY LABEL ON TABLE shop.orders IS 'x'",
			"CREATE PUBLICATION p FOR TABLE shop.orders",
			"CREATE SUBSCRIPTION s CONNECTION 'dbname=x' PUBLICATION p WITH (connect = false)",
			"CREATE EXTENSION IF NOT EXISTS dblink",
			"SELECT lo_put(lo_create(0), 0, 'x'), lo_unlink(0)",
			"REINDEX TABLE shop.orders",
			"CLUSTER shop.orders USING orders_pkey",
			"VACUUM (FULL) shop.orders",
		} {
			_, _ = f.app.Exec(ctx, q)
		}
		mustExec(t, f.app, "CREATE MATERIALIZED VIEW app.mv AS SELECT * FROM shop.orders; REFRESH MATERIALIZED VIEW app.mv")
		if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner, Grant: []string{f.db.App}}); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		nobody := pgfencetest.Role(t, f.db.DSN, "fg_nobody_", "LOGIN")
		for _, role := range []string{f.db.App, nobody, "public"} {
			rows, err := f.admin.Query(ctx, `
				SELECT p.oid::regprocedure::text FROM pg_proc p
				WHERE p.pronamespace = 'fencegate'::regnamespace AND has_function_privilege($1::name, p.oid, 'EXECUTE')
				  AND NOT (p.proname IN ('fence', 'fence_many', 'effect') AND $1::name <> 'public' AND $1::name <> $2::name)
				UNION ALL
				SELECT c.oid::regclass::text || ' ' || x.priv FROM pg_class c,
				       unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) x(priv)
				WHERE c.relnamespace = 'fencegate'::regnamespace AND c.relkind IN ('r', 'p', 'v')
				  AND has_table_privilege($1::name, c.oid, x.priv)
				UNION ALL
				SELECT c.oid::regclass::text || ' ' || x.priv FROM pg_class c, unnest(ARRAY['USAGE', 'UPDATE']) x(priv)
				WHERE c.relnamespace = 'fencegate'::regnamespace AND c.relkind = 'S' AND has_sequence_privilege($1::name, c.oid, x.priv)
				UNION ALL
				SELECT 'CREATE on schema fencegate' WHERE has_schema_privilege($1::name, 'fencegate', 'CREATE')
				UNION ALL
				SELECT 'SELECT on ' || c.oid::regclass::text FROM pg_class c
				WHERE c.relnamespace = 'fencegate'::regnamespace AND c.relname IN ('signing_keys', 'audit', 'effects') AND has_table_privilege($1::name, c.oid, 'SELECT')`,
				role, nobody)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > 0 {
				t.Errorf("role %s may: %q", role, got)
			}
		}
	}},
	{"a stale holder racing a newer one", func(t *testing.T, f *fixture) {
		// The stale holder's transaction starts first and, under
		// REPEATABLE READ, keeps a snapshot from before the newer holder's
		// fence; under READ COMMITTED it waits for the newer holder's row
		// lock. Either way its fence fails once the newer one committed.
		mustExec(t, f.admin, "SELECT fencegate.set_mark('order:1', 9, 'test')")
		ctx := context.Background()
		newer := f.appConn(t)
		for _, iso := range []string{"REPEATABLE READ", "SERIALIZABLE", "READ COMMITTED"} {
			old := f.appConn(t)
			mustExec(t, old, "BEGIN ISOLATION LEVEL "+iso)
			mustExec(t, old, "SELECT count(*) FROM fencegate.marks")
			token := map[string]int{"REPEATABLE READ": 10, "SERIALIZABLE": 11, "READ COMMITTED": 12}[iso]
			ntx, err := newer.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ntx.Exec(ctx, "SELECT fencegate.fence('order:1', $1::bigint)", token); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := old.Exec(ctx, "SELECT fencegate.fence('order:1', 9)")
				if err == nil {
					_, err = old.Exec(ctx, "UPDATE shop.orders SET state = 'stale' WHERE id = 1")
				}
				if err == nil {
					_, err = old.Exec(ctx, "COMMIT")
				}
				done <- err
			}()
			if err := ntx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-done
			_, _ = old.Exec(ctx, "ROLLBACK")
			expectErr(t, iso+" stale holder", err, "")
			if c := sqlstate(err); c != fencegate.CodeStaleToken && c != "40001" {
				t.Fatalf("%s stale holder: %v, want FG001 or a serialization failure", iso, err)
			}
		}
	}},
	{"extended-protocol sequences around the fence", func(t *testing.T, f *fixture) {
		// A suspended portal of an UPDATE ... RETURNING, pipelined fences
		// without Sync, a fence whose Execute asks for no rows, a fence
		// portal closed before it ran, a Flush instead of a Sync.
		codes := rawExchange(t, f.app,
			&pgproto3.Query{String: "BEGIN"},
			&pgproto3.Parse{Name: "f", Query: "SELECT fencegate.fence($1, $2::bigint)"},
			&pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "f", Parameters: [][]byte{[]byte("order:1"), []byte("1")}},
			&pgproto3.Close{ObjectType: 'P', Name: "p1"},
			&pgproto3.Bind{DestinationPortal: "p2", PreparedStatement: "f", Parameters: [][]byte{[]byte("order:2"), []byte("1")}},
			&pgproto3.Execute{Portal: "p2", MaxRows: 1},
			&pgproto3.Parse{Name: "u", Query: "UPDATE shop.orders SET state = 'portal' WHERE id IN (1, 2) RETURNING id"},
			&pgproto3.Bind{DestinationPortal: "p3", PreparedStatement: "u"},
			&pgproto3.Execute{Portal: "p3", MaxRows: 1},
			&pgproto3.Flush{},
			&pgproto3.Sync{},
			&pgproto3.Query{String: "COMMIT"},
		)
		lastCode(t, "suspended UPDATE portal after a closed fence portal", codes, fencegate.CodeUnfenced)
		codes = rawExchange(t, f.app,
			&pgproto3.Query{String: "BEGIN"},
			&pgproto3.Parse{Name: "g", Query: "SELECT fencegate.fence('order:1', g) FROM generate_series(1, 3) g"},
			&pgproto3.Bind{DestinationPortal: "p4", PreparedStatement: "g"},
			&pgproto3.Execute{Portal: "p4", MaxRows: 1},
			&pgproto3.Sync{},
			&pgproto3.Query{String: "ROLLBACK"},
			&pgproto3.Query{String: "BEGIN"},
			&pgproto3.Query{String: "DECLARE c CURSOR WITH HOLD FOR SELECT fencegate.fence('order:1', 1)"},
			&pgproto3.Query{String: "COMMIT"},
			&pgproto3.Query{String: "BEGIN"},
			&pgproto3.Query{String: "FETCH c"},
			&pgproto3.Query{String: "UPDATE shop.orders SET state = 'held' WHERE id = 1"},
			&pgproto3.Query{String: "COMMIT"},
		)
		lastCode(t, "write after a WITH HOLD cursor over a fence", codes, fencegate.CodeUnfenced)
		codes = rawExchange(t, f.app,
			&pgproto3.Query{String: "BEGIN"},
			&pgproto3.Query{String: "DECLARE c2 CURSOR FOR SELECT fencegate.fence('order:1', g) FROM generate_series(1, 2) g"},
			&pgproto3.Query{String: "MOVE ABSOLUTE 0 IN c2"},
			&pgproto3.Query{String: "UPDATE shop.orders SET state = 'moved' WHERE id = 1"},
			&pgproto3.Query{String: "COMMIT"},
		)
		lastCode(t, "write after a cursor over a fence, never fetched", codes, fencegate.CodeUnfenced)
	}},
	{"startup parameters through the gate", func(t *testing.T, f *fixture) {
		ctx := context.Background()
		mustExec(t, f.app, `CREATE FUNCTION app.yes(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
			CREATE OPERATOR app.= (LEFTARG = text, RIGHTARG = text, FUNCTION = app.yes)`)
		for _, opt := range []string{
			"options=-c%20session_replication_role%3Dreplica",
			"options=-c%20session_authorization%3Dpostgres",
			"options=-c%20role%3D" + f.data,
			"options=-c%20default_transaction_read_only%3Don",
			"options=-c%20search_path%3Dapp%2Cpg_temp%2Cpg_catalog",
			"options=-c%20allow_system_table_mods%3Don",
			"replication=database",
			"replication=true",
		} {
			dsn := f.appDSN
			if strings.Contains(dsn, "?") {
				dsn += "&" + opt
			} else {
				dsn += "?" + opt
			}
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatalf("%s: %v", opt, err)
			}
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			c, err := pgx.ConnectConfig(cctx, cfg)
			cancel()
			if err != nil {
				continue // refused at startup: the route is closed
			}
			err = script(c, "BEGIN", "SELECT fencegate.fence('order:2', 1)", "UPDATE shop.orders SET state = 'startup' WHERE id = 1", "COMMIT")
			c.Close(ctx)
			expectErr(t, "write in a session started with "+opt, err, "")
			if code := sqlstate(err); code != fencegate.CodeUnfenced && code != "25006" {
				t.Fatalf("write in a session started with %s: %v, want FG002", opt, err)
			}
		}
	}},
}

// gateOnly names the routes of roles that straight to PostgreSQL are
// trusted by design, like a superuser: they are tried through the gate
// only.
var gateOnly = map[string]bool{
	"pg_write_all_data through the gate":                         true,
	"other roles the gate must refuse":                           true,
	"TRIGGER held by a role reached with SET ROLE":               true,
	"a function of the application in a protected table's index": true,
}

// TestIndirectAttacks runs every route of indirectAttacks on a fresh fixture per
// route and path. The routes run in parallel (as many as -parallel
// allows): each has its own database, roles and proxies, and most of a
// route's time is spent waiting for PostgreSQL to build its fixture.
func TestIndirectAttacks(t *testing.T) {
	for _, via := range []path{direct, viaProxy} {
		t.Run(string(via), func(t *testing.T) {
			for _, a := range indirectAttacks {
				if via == direct && gateOnly[a.name] {
					continue
				}
				t.Run(a.name, func(t *testing.T) {
					t.Parallel()
					f := newFixtureVia(t, via)
					data := f.dataSnapshot(t)
					before := f.marksMap(t)
					a.run(t, f)
					if after := f.dataSnapshot(t); after != data {
						t.Fatalf("protected rows changed:\nbefore:\n%s\nafter:\n%s", data, after)
					}
					after := f.marksMap(t)
					for r, tok := range before {
						if got, ok := after[r]; !ok || got < tok {
							t.Fatalf("mark %s went down from %d to %d (present: %v)", r, tok, got, ok)
						}
					}
				})
			}
		})
	}
}

// quoteLit quotes s as an SQL string literal.
func quoteLit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
