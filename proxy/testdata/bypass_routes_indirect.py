"""Indirect bypass routes from a non-Go client, the ones that go around the
fence rather than at it as bypass_routes.py does: triggers of the
application's own tables, statements that write a protected table twice,
rows moved across partitions, the resource column itself, shadow tables in
pg_temp, fences undone in subtransactions, cursors, psycopg2's batch
helpers and two-phase API, startup options, a stale holder racing a newer
one; and roles with rights beyond the documented grants, which the gate
must refuse at startup.

Usage: bypass_routes_indirect.py ADMIN_DSN NAME=APP_DSN [NAME=APP_DSN...]
                                 [gate:KIND=DSN...]

NAME=APP_DSN paths are the application role's (straight to PostgreSQL,
through the gate): every route runs along each. gate:KIND=DSN is a role
with more than the documented grants, through the gate: KIND is
write_all_data (a member of pg_write_all_data) or trigger (TRIGGER on the
tables of schema shop). The gate must refuse its session (SQLSTATE FG007);
if it does not, the route that role's rights open is tried.

After each route the referee (a direct superuser connection) compares
every table of schema shop and the marks with what they were before: one
line per route and path; the exit status is 1 when a protected row changed
or a mark went down (or vanished), 2 on bad usage. The database is the one
proxy/bypass_test.go builds (see bypass_routes.py): orders 1, 2 (customer
1) and 3 (customer 2); marks order:1 = 9, order:2 = 50, acct:5 = 9.
"""
import sys
import threading

import psycopg2
import psycopg2.extras

from bypass_routes import connect, run, snapshot, _lines


def expect_error(conn, *stmts):
    """Runs stmts; an error ends the transaction and is swallowed (the
    route goes on), success is returned as True."""
    try:
        run(conn, *stmts)
        return True
    except psycopg2.Error:
        run(conn, "ROLLBACK")
        return False


def own_triggers(conn, dsn, n):
    run(conn, "CREATE TABLE app.src_%s (i int)" % n,
        "CREATE TABLE app.deep_%s (k int)" % n,
        "CREATE FUNCTION app.bt_%s() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN UPDATE shop.orders SET state = 'before' WHERE id = 1; RETURN NEW; END$$" % n,
        "CREATE FUNCTION app.st_%s() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN UPDATE shop.orders SET state = 'stmt' WHERE id IN (SELECT i FROM nt); RETURN NULL; END$$" % n,
        "CREATE FUNCTION app.dt_%s() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN DELETE FROM shop.orders WHERE id = NEW.i; RETURN NULL; END$$" % n,
        "CREATE FUNCTION app.rt_%s() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN IF NEW.k < 4 THEN INSERT INTO app.deep_%s VALUES (NEW.k + 1); "
        "ELSE UPDATE shop.orders SET state = 'deep' WHERE id = 2; END IF; RETURN NEW; END$$" % (n, n),
        "CREATE TRIGGER a BEFORE INSERT ON app.src_%s FOR EACH ROW WHEN (NEW.i = 1) EXECUTE FUNCTION app.bt_%s()" % (n, n),
        "CREATE TRIGGER b AFTER INSERT ON app.src_%s REFERENCING NEW TABLE AS nt FOR EACH STATEMENT "
        "EXECUTE FUNCTION app.st_%s()" % (n, n),
        "CREATE TRIGGER d AFTER INSERT ON app.deep_%s FOR EACH ROW EXECUTE FUNCTION app.rt_%s()" % (n, n))
    for q in ["INSERT INTO app.src_%s VALUES (1)" % n, "INSERT INTO app.src_%s VALUES (2)" % n,
              "INSERT INTO app.deep_%s VALUES (0)" % n]:
        expect_error(conn, "BEGIN", "SELECT fencegate.fence('order:3', 1)", q, "COMMIT")
    # A deferred constraint trigger writes at COMMIT, after a fence on
    # another resource and a fence on the right one rolled back.
    run(conn, "DROP TRIGGER a ON app.src_%s" % n, "DROP TRIGGER b ON app.src_%s" % n,
        "CREATE CONSTRAINT TRIGGER c AFTER INSERT ON app.src_%s DEFERRABLE INITIALLY DEFERRED "
        "FOR EACH ROW EXECUTE FUNCTION app.dt_%s()" % (n, n))
    expect_error(conn, "BEGIN", "SELECT fencegate.fence('order:3', 1)", "INSERT INTO app.src_%s VALUES (1)" % n, "COMMIT")
    run(conn, "BEGIN", "INSERT INTO app.src_%s VALUES (1)" % n, "SAVEPOINT s",
        "SELECT fencegate.fence('order:1', 10)", "ROLLBACK TO SAVEPOINT s", "COMMIT")


def table_twice(conn, dsn, n):
    for q in [
        "WITH a AS (UPDATE shop.orders SET state = 'a' WHERE id = 3 RETURNING 1), "
        "b AS (UPDATE shop.orders SET state = 'b' WHERE id = 1 RETURNING 1) SELECT * FROM a, b",
        "WITH a AS (INSERT INTO shop.orders VALUES (10, 1, 'n', 1) RETURNING 1) UPDATE shop.orders SET state = 'cte' WHERE id = 1",
        "WITH a AS (DELETE FROM shop.orders WHERE id = 1 RETURNING *) INSERT INTO shop.orders SELECT 10, customer, state, amount FROM a",
        "MERGE INTO shop.orders o USING (VALUES (1), (3), (10)) v(id) ON o.id = v.id WHEN MATCHED AND o.id = 1 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET state = 'm' WHEN NOT MATCHED THEN INSERT VALUES (v.id, 1, 'm', 0)",
        "INSERT INTO shop.orders VALUES (10, 1, 'n', 0), (1, 1, 'n', 0) ON CONFLICT (id) DO UPDATE SET state = 'both'",
        "INSERT INTO shop.orders VALUES (3, 2, 'n', 0) ON CONFLICT (id) DO UPDATE SET id = 12",
        "UPDATE shop.orders o SET state = v.s FROM (VALUES (3, 'x'), (1, 'y'), (1, 'z')) v(id, s) WHERE o.id = v.id",
    ]:
        expect_error(conn, "BEGIN", "SELECT fencegate.fence('order:3', 1), fencegate.fence('order:10', 1)", q, "COMMIT")
    run(conn, "BEGIN", "SELECT fencegate.fence('order:3', 1)",
        "WITH a AS (UPDATE shop.orders SET state = 'a' WHERE id = 3 RETURNING 1) UPDATE shop.orders SET state = 'b' WHERE id = 2",
        "COMMIT")


def partition_moves(conn, dsn, n):
    for fence, q in [
        ("acct:150", "UPDATE shop.events SET account = 150 WHERE id = 1"),
        ("acct:151", "UPDATE shop.events_p1 SET id = id + 1, account = 151 WHERE id = 100"),
        ("acct:7", "UPDATE shop.ledger SET acct = acct + 0"),
        ("acct:8", "UPDATE shop.ledger SET acct = 8 WHERE id = 1"),
    ]:
        expect_error(conn, "BEGIN", "SELECT fencegate.fence('%s', 1)" % fence, q, "COMMIT")
    run(conn, "BEGIN", "SELECT fencegate.fence('acct:5', 10)",
        "WITH m AS (UPDATE shop.events SET account = 6 WHERE id = 1 RETURNING 1) DELETE FROM shop.events_p0 WHERE id = 2",
        "COMMIT")


def merge_move(conn, dsn, n):
    # A MERGE whose UPDATE action moves a row to another partition (a
    # DELETE from the old leaf and an INSERT into the new one); the same
    # move by plain UPDATE is refused.
    # move() always crosses partitions, wherever an earlier path left the row.
    move = "UPDATE SET account = CASE WHEN e.account < 100 THEN e.account + 100 ELSE e.account - 100 END"
    expect_error(conn, "BEGIN", "SELECT fencegate.fence('acct:5', 10)",
                 "MERGE INTO shop.events e USING (VALUES (1)) v(id) ON e.id = v.id WHEN MATCHED THEN " + move,
                 "COMMIT")
    run(conn, "MERGE INTO shop.events e USING (VALUES (2)) v(id) ON e.id = v.id WHEN MATCHED THEN " + move)


def resource_column(conn, dsn, n):
    for q in ["INSERT INTO shop.orders (id, customer, state, amount, fencegate_resource) VALUES (10, 1, 'g', 0, 'order:3')",
              "INSERT INTO shop.orders OVERRIDING SYSTEM VALUE VALUES (10, 1, 'g', 0, 'order:3')",
              "UPDATE shop.orders SET fencegate_resource = 'order:3' WHERE id = 1",
              "INSERT INTO shop.orders SELECT * FROM shop.orders WHERE id = 1 ON CONFLICT (id) DO UPDATE SET state = 'g'"]:
        expect_error(conn, "BEGIN", "SELECT fencegate.fence('order:3', 1)", q, "COMMIT")
    for data in ["10\t1\tg\t0\torder:3\n", "1\t1\tg\t0\n"]:
        try:
            run(conn, "BEGIN", "SELECT fencegate.fence('order:3', 1)")
            conn.cursor().copy_expert("COPY shop.orders FROM STDIN WITH (FREEZE)", _lines(data))
            run(conn, "COMMIT")
        except psycopg2.Error:
            run(conn, "ROLLBACK")
    run(conn, "BEGIN", "SELECT fencegate.fence('acct:', 1)", "INSERT INTO shop.ledger VALUES (5, NULL, 1)", "COMMIT")


def shadow_tables(conn, dsn, n):
    run(conn, "CREATE TEMP TABLE fg_new (fencegate_resource text)",
        "CREATE TEMP TABLE fg_old (fencegate_resource text)",
        "CREATE TEMP TABLE marks (resource text, token bigint, updated_at timestamptz, holder_xid xid8, holder_boot timestamptz)",
        "INSERT INTO fg_new VALUES ('order:3')", "INSERT INTO fg_old VALUES ('order:3')")
    for path in ["pg_temp, app, pg_catalog, fencegate", "fencegate, app"]:
        run(conn, "SET search_path = " + path)
        expect_error(conn, "BEGIN",
                     "INSERT INTO pg_temp.marks VALUES ('order:1', 99, now(), pg_current_xact_id(), pg_postmaster_start_time())",
                     "SELECT fencegate.fence('order:3', 1)",
                     "UPDATE shop.orders SET state = 'shadow' WHERE id = 1", "COMMIT")
    run(conn, "BEGIN", "INSERT INTO pg_temp.marks VALUES ('order:10', 99, now(), pg_current_xact_id(), pg_postmaster_start_time())",
        "INSERT INTO shop.orders VALUES (10, 1, 'shadow', 0)", "COMMIT")


def subtransaction_fence(conn, dsn, n):
    run(conn, "CREATE FUNCTION app.try_%s() RETURNS void LANGUAGE plpgsql AS $$BEGIN "
              "BEGIN PERFORM fencegate.fence('order:1', 10); PERFORM 1 / 0; EXCEPTION WHEN division_by_zero THEN NULL; END; "
              "END$$" % n)
    expect_error(conn, "BEGIN", "SELECT app.try_%s()" % n, "UPDATE shop.orders SET state = 'exc' WHERE id = 1", "COMMIT")
    expect_error(conn, "BEGIN", "SAVEPOINT a", "SAVEPOINT b", "SELECT fencegate.fence('order:1', 10)", "RELEASE SAVEPOINT b",
                 "ROLLBACK TO SAVEPOINT a", "UPDATE shop.orders SET state = 'released' WHERE id = 1", "COMMIT")
    run(conn, "BEGIN", "DO $$BEGIN BEGIN PERFORM fencegate.fence('order:1', 10); RAISE EXCEPTION 'x'; "
              "EXCEPTION WHEN OTHERS THEN NULL; END; UPDATE shop.orders SET state = 'do' WHERE id = 1; END$$", "COMMIT")


def cursors(conn, dsn, n):
    # A WITH HOLD cursor runs its query at COMMIT of the declaring
    # transaction; a named (server-side) psycopg2 cursor that is never
    # fetched never runs its fence.
    run(conn, "BEGIN", "DECLARE h CURSOR WITH HOLD FOR SELECT fencegate.fence('order:1', 10)", "COMMIT")
    expect_error(conn, "BEGIN", "FETCH h", "UPDATE shop.orders SET state = 'held' WHERE id = 1", "COMMIT")
    conn.autocommit = False
    try:
        named = conn.cursor(name="fence_%s" % n)
        named.execute("SELECT fencegate.fence('order:1', g) FROM generate_series(10, 11) g")
        conn.cursor().execute("UPDATE shop.orders SET state = 'named' WHERE id = 1")
        conn.commit()
    finally:
        conn.rollback()
        conn.autocommit = True


def batch_helpers(conn, dsn, n):
    # psycopg2's batch helpers join statements into one Query: a fence on
    # another resource in the same batch does not cover the write.
    conn.autocommit = False
    try:
        cur = conn.cursor()
        psycopg2.extras.execute_batch(cur, "SELECT fencegate.fence(%s, 1); UPDATE shop.orders SET state = %s WHERE id = %s",
                                      [("order:3", "batch", 3), ("order:3", "batch", 1)])
        conn.commit()
    finally:
        conn.rollback()
        conn.autocommit = True


def callproc_and_tpc(conn, dsn, n):
    conn.autocommit = False
    try:
        conn.cursor().callproc("fencegate.fence", ("order:3", 1))
        conn.cursor().execute("UPDATE shop.orders SET state = 'callproc' WHERE id = 1")
        conn.commit()
    except psycopg2.Error:
        conn.rollback()
    xid = conn.xid(1, "fg_%s" % n, "b")
    try:
        conn.tpc_begin(xid)
        conn.cursor().execute("SELECT fencegate.fence('order:1', 10)")
        conn.tpc_prepare()
    except psycopg2.Error:
        pass
    try:
        conn.tpc_rollback()
    except psycopg2.Error:
        conn.rollback()
    conn.autocommit = True
    run(conn, "UPDATE shop.orders SET state = 'tpc' WHERE id = 1")


def startup_options(conn, dsn, n):
    run(conn, "CREATE FUNCTION app.yes_%s(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'" % n,
        "DROP OPERATOR IF EXISTS app.= (text, text)",
        "CREATE OPERATOR app.= (LEFTARG = text, RIGHTARG = text, FUNCTION = app.yes_%s)" % n)
    for opts in ["-c session_replication_role=replica", "-c role=" + OWNER_ROLE[0],
                 "-c search_path=app,pg_temp,pg_catalog", "-c allow_system_table_mods=on"]:
        try:
            other = psycopg2.connect(dsn, options=opts)
        except psycopg2.Error:
            continue
        other.autocommit = True
        try:
            expect_error(other, "BEGIN", "SELECT fencegate.fence('order:3', 1)",
                         "UPDATE shop.orders SET state = 'options' WHERE id = 1", "COMMIT")
        finally:
            other.close()
    run(conn, "SET search_path = app, pg_temp, pg_catalog", "UPDATE shop.orders SET state = 'options' WHERE id = 1")


def stale_race(conn, dsn, n):
    # The stale holder began first, with a token equal to the mark (which
    # alone would be accepted); the newer holder's fence, one higher,
    # commits while the stale one waits for its row lock (or holds an older
    # snapshot).
    for iso in ["REPEATABLE READ", "READ COMMITTED"]:
        newer = connect(dsn)
        try:
            cur = conn.cursor()
            cur.execute("SELECT token FROM fencegate.marks WHERE resource = 'order:2'")
            mark = cur.fetchone()[0]
            run(conn, "BEGIN ISOLATION LEVEL " + iso, "SELECT count(*) FROM fencegate.marks")
            run(newer, "BEGIN", "SELECT fencegate.fence('order:2', %d)" % (mark + 1))
            result = []

            def stale():
                try:
                    run(conn, "SELECT fencegate.fence('order:2', %d)" % mark,
                        "UPDATE shop.orders SET state = 'race' WHERE id = 2", "COMMIT")
                    result.append(None)
                except psycopg2.Error as e:
                    result.append(e)

            th = threading.Thread(target=stale)
            th.start()
            run(newer, "COMMIT")
            th.join(30)
            run(conn, "ROLLBACK")
            if not result or result[0] is None:
                raise RuntimeError("stale holder under %s: no error" % iso)
        finally:
            newer.close()
    run(conn, "UPDATE shop.orders SET state = 'race' WHERE id = 2")


ROUTES = [
    ("triggers of application tables, deferred too", own_triggers),
    ("statements writing orders twice", table_twice),
    ("rows moved across partitions and children", partition_moves),
    ("MERGE moving a row across partitions", merge_move),
    ("writing fencegate_resource, COPY FREEZE", resource_column),
    ("shadow tables in pg_temp and search_path", shadow_tables),
    ("fences undone in subtransactions", subtransaction_fence),
    ("WITH HOLD and named cursors over a fence", cursors),
    ("execute_batch with a fence in the batch", batch_helpers),
    ("callproc and the two-phase API", callproc_and_tpc),
    ("startup options", startup_options),
    ("a stale holder racing a newer one", stale_race),
]

OWNER_ROLE = [None]


def write_all_data(conn):
    run(conn, "BEGIN",
        "UPDATE fencegate.marks SET holder_xid = pg_current_xact_id(), holder_boot = pg_postmaster_start_time() "
        "WHERE resource = 'order:1'",
        "UPDATE shop.orders SET state = 'forged' WHERE id = 1", "COMMIT")
    run(conn, "UPDATE fencegate.marks SET token = 0 WHERE resource = 'order:2'")


def trigger(conn):
    run(conn, "CREATE OR REPLACE FUNCTION app.nothing() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$",
        "CREATE OR REPLACE TRIGGER fencegate_upd AFTER UPDATE ON shop.orders FOR EACH STATEMENT EXECUTE FUNCTION app.nothing()",
        "UPDATE shop.orders SET state = 'replaced' WHERE id = 1")


GATED = {"write_all_data": write_all_data, "trigger": trigger}


def referee(admin, label, path, fn):
    rows, marks = snapshot(admin)
    try:
        outcome = fn() or "no error"
    except (psycopg2.Error, RuntimeError) as e:
        outcome = "%s %s" % (getattr(e, "pgcode", None) or type(e).__name__,
                             (getattr(e, "pgerror", None) or str(e)).strip().splitlines()[0])
    after_rows, after_marks = snapshot(admin)
    bad = []
    if after_rows != rows:
        bad.append("protected rows changed: %s -> %s" % (
            [r for r in rows if r not in after_rows], [r for r in after_rows if r not in rows]))
    for r, tok in marks.items():
        if after_marks.get(r, -1) < tok:
            bad.append("mark %s went down from %d to %s" % (r, tok, after_marks.get(r)))
    print("%-4s %-6s %-52s %s%s" % ("FAIL" if bad else "ok", path, label, outcome, "".join("\n     " + b for b in bad)))
    return 1 if bad else 0


def main(argv):
    if len(argv) < 3 or any("=" not in a.split("://")[0] for a in argv[2:]):
        print("usage: bypass_routes_indirect.py ADMIN_DSN NAME=APP_DSN [NAME=APP_DSN...] [gate:KIND=DSN...]", file=sys.stderr)
        return 2
    admin = psycopg2.connect(argv[1])
    admin.autocommit = True
    cur = admin.cursor()
    cur.execute("SELECT quote_ident(nspowner::regrole::text) FROM pg_namespace WHERE nspname = 'shop'")
    OWNER_ROLE[0] = cur.fetchone()[0]
    args = [a.split("=", 1) for a in argv[2:]]
    paths = [(k, v) for k, v in args if not k.startswith("gate:")]
    gated = [(k[len("gate:"):], v) for k, v in args if k.startswith("gate:")]
    if any(k not in GATED for k, _ in gated):
        print("unknown gate:KIND, want one of %s" % sorted(GATED), file=sys.stderr)
        return 2
    failed = 0
    total = 0
    for pi, (name, dsn) in enumerate(paths):
        for ri, (route, fn) in enumerate(ROUTES):
            def attempt():
                conn = connect(dsn)
                try:
                    fn(conn, dsn, "m%d_%d" % (pi, ri))
                finally:
                    conn.close()
            failed += referee(admin, route, name, attempt)
            total += 1
    for kind, dsn in gated:
        def attempt():
            try:
                conn = connect(dsn)
            except psycopg2.Error as e:
                if e.pgcode == "FG007" or "FG007" in str(e) or "admits application roles only" in str(e):
                    return "refused at startup (FG007)"
                raise
            try:
                GATED[kind](conn)
            finally:
                conn.close()
            return "ADMITTED by the gate"
        failed += referee(admin, "role with " + kind, "gate", attempt)
        total += 1
    print("%d routes, %d failed" % (total, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
