"""The bypass suite from a non-Go client: every route a client could take to
get an unfenced or stale write past fencegate, sent through psycopg2 as the
application role along each path given (straight to PostgreSQL, through the
gate proxy). After each route the referee (a direct superuser connection)
compares every table of schema shop and the marks with what they were
before: one line per route and path; the exit status is 1 when a protected
row changed or a mark went down (or vanished), 2 on bad usage.

Usage: bypass_routes.py ADMIN_DSN NAME=APP_DSN [NAME=APP_DSN...]

The database is the one the Go test (proxy/bypass_test.go) builds: schema
shop owned by another role, with customers (not protected), orders
('order:' || id, cascading from customers), events (partitioned by account,
'acct:' || account), ledger (with an inheritance child, 'acct:' || acct);
schema app owned by the application role; marks order:1 = 9, order:2 = 50,
acct:5 = 9.
"""
import sys

import psycopg2
import psycopg2.extensions

OPTIONS = "-c lock_timeout=5s -c statement_timeout=30s"
OWNER = None  # the role owning schema shop, read from the database

TABLES = [
    "SELECT coalesce(string_agg(c::text, ';' ORDER BY c::text), '') FROM shop.customers c",
    "SELECT coalesce(string_agg(o::text, ';' ORDER BY o::text), '') FROM shop.orders o",
    "SELECT coalesce(string_agg(e::text || e.tableoid::regclass::text, ';' ORDER BY e::text), '') FROM shop.events e",
    "SELECT coalesce(string_agg(l::text || l.tableoid::regclass::text, ';' ORDER BY l::text), '') FROM shop.ledger l",
]


def snapshot(admin):
    cur = admin.cursor()
    rows = []
    for q in TABLES:
        cur.execute(q)
        rows.append(cur.fetchone()[0])
    cur.execute("SELECT resource, token FROM fencegate.marks")
    return rows, dict(cur.fetchall())


def connect(dsn):
    conn = psycopg2.connect(dsn, options=OPTIONS)
    conn.autocommit = True  # each route sends its own BEGIN/COMMIT
    return conn


def run(conn, *stmts):
    """Executes stmts in order; the first error propagates."""
    cur = conn.cursor()
    for s in stmts:
        cur.execute(s)


# Each route takes (conn, dsn, n): a fresh application connection, its DSN
# (for routes that need a second session) and a suffix unique to the path
# for objects the route creates. It may raise; the error is what we expect.
def chain(end):
    def route(conn, dsn, n):
        run(conn, "BEGIN", "SELECT fencegate.fence('order:1', 10)", end,
            "UPDATE shop.orders SET state = 'chained' WHERE id = 1", "COMMIT")
    return route


def srf_fence(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:1', generate_series(1, 0))",
        "UPDATE shop.orders SET state = 'srf' WHERE id = 1", "COMMIT")


def savepoint_fence(conn, dsn, n):
    run(conn, "BEGIN", "SAVEPOINT s", "SELECT fencegate.fence('order:1', 10)", "ROLLBACK TO SAVEPOINT s",
        "UPDATE shop.orders SET state = 'savepoint' WHERE id = 1", "COMMIT")


def caught_stale(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:1', 10)", "SAVEPOINT s")
    try:
        run(conn, "SELECT fencegate.fence('order:2', 5)")
    except psycopg2.Error:
        pass
    run(conn, "ROLLBACK TO SAVEPOINT s", "UPDATE shop.orders SET state = 'caught' WHERE id = 2", "COMMIT")


def stale(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 5)", "UPDATE shop.orders SET state = 'stale' WHERE id = 2", "COMMIT")


def typo(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('ordr:1', 10)", "UPDATE shop.orders SET state = 'typo' WHERE id = 1", "COMMIT")


def other_fence(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 51)", "UPDATE shop.orders SET state = 'other' WHERE id = 1", "COMMIT")


def unfenced(conn, dsn, n):
    run(conn, "UPDATE shop.orders SET state = 'unfenced' WHERE id = 1")


def earlier_tx(conn, dsn, n):
    run(conn, "SELECT fencegate.fence('order:1', 10)", "UPDATE shop.orders SET state = 'later' WHERE id = 1")


def other_session(conn, dsn, n):
    other = connect(dsn)
    try:
        run(other, "BEGIN", "SELECT fencegate.fence('order:1', 10)")
        run(conn, "UPDATE shop.orders SET state = 'next door' WHERE id = 1")
    finally:
        other.close()


def do_commit(conn, dsn, n):
    run(conn, "DO $$BEGIN PERFORM fencegate.fence('order:1', 10); COMMIT; "
              "UPDATE shop.orders SET state = 'do' WHERE id = 1; END$$")


def procedure_commit(conn, dsn, n):
    run(conn, "CREATE PROCEDURE app.p_%s() LANGUAGE plpgsql AS $$BEGIN PERFORM fencegate.fence('order:1', 10); "
              "COMMIT; UPDATE shop.orders SET state = 'proc' WHERE id = 1; END$$" % n,
        "CALL app.p_%s()" % n)


def unicode_read_only(conn, dsn, n):
    run(conn, "BEGIN READ ONLY", 'SET U&"transaction\\005Fread\\005Fonly" = off',
        "UPDATE shop.orders SET state = 'uescape' WHERE id = 1", "COMMIT")


def set_config_pieces(conn, dsn, n):
    run(conn, "SET default_transaction_read_only = on",
        "SELECT set_config('default_transaction_' || 'read_' || 'only', 'off', false)",
        "BEGIN", "SELECT set_config('transaction_' || 'read_' || 'only', 'off', true)",
        "UPDATE shop.orders SET state = 'pieces' WHERE id = 1", "COMMIT")


def replication_role(conn, dsn, n):
    try:
        run(conn, "SET session_replication_role = replica")
    except psycopg2.Error:
        pass
    try:
        run(conn, "SELECT set_config('session_replication_' || 'role', 'replica', false)")
    except psycopg2.Error:
        pass
    run(conn, "UPDATE shop.orders SET state = 'replica' WHERE id = 1")


def cr_comment(conn, dsn, n):
    # A -- comment ends at a carriage return as well as at a newline.
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 51); -- note\rUPDATE shop.orders SET state = 'cr' WHERE id = 1",
        "COMMIT")


def backslash_strings(conn, dsn, n):
    # With standard_conforming_strings off, 'a\\' is the string a\ and the
    # UPDATE after it runs; a reader assuming the opposite sees one string.
    run(conn, "SET standard_conforming_strings = off",
        "BEGIN", "SELECT fencegate.fence('order:2', 51), 'a\\\\'; UPDATE shop.orders SET state = 'bs' WHERE id = 1; --'",
        "COMMIT")


def backslash_strings_on(conn, dsn, n):
    # And with it on, 'a\' is the string a\ and the UPDATE after it runs.
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 51), 'a\\'; UPDATE shop.orders SET state = 'bs' WHERE id = 1; --'",
        "COMMIT")


def multi_statement(conn, dsn, n):
    run(conn, "BEGIN; SELECT fencegate.fence('order:2', 51); UPDATE shop.orders SET state = 'multi' WHERE id = 1; COMMIT")


def cte_fence(conn, dsn, n):
    run(conn, "WITH f AS (SELECT fencegate.fence('order:2', 51) AS t) "
              "UPDATE shop.orders SET state = 'cte' WHERE id = 1 AND (SELECT count(*) FROM f) = 1")


def where_fence(conn, dsn, n):
    run(conn, "UPDATE shop.orders SET state = 'where' WHERE id = 1 AND fencegate.fence('order:2', 51) > 0")


def write_marks(conn, dsn, n):
    for q in ["UPDATE fencegate.marks SET token = 0", "DELETE FROM fencegate.marks",
              "INSERT INTO fencegate.marks (resource, token) VALUES ('order:3', 0)", "TRUNCATE fencegate.marks",
              "SELECT fencegate.set_mark('order:1', 0, 'attack')"]:
        try:
            run(conn, "BEGIN", "SELECT fencegate.fence('order:1', 10)", q, "COMMIT")
        except psycopg2.Error:
            run(conn, "ROLLBACK")
    run(conn, "UPDATE shop.orders SET state = 'marks' WHERE id = 2")


def copy_marks(conn, dsn, n):
    conn.cursor().copy_expert("COPY fencegate.marks (resource, token) FROM STDIN", _lines("order:2\t0\n"))


def replace_fence(conn, dsn, n):
    try:
        run(conn, "CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint) RETURNS bigint "
                  "LANGUAGE sql AS 'SELECT token'")
    except psycopg2.Error:
        pass
    run(conn, "UPDATE shop.orders SET state = 'replaced' WHERE id = 1")


def overload_fence(conn, dsn, n):
    try:
        run(conn, "CREATE FUNCTION fencegate.fence(resource text, token integer) RETURNS bigint "
                  "LANGUAGE sql AS 'SELECT 1::bigint'")
    except psycopg2.Error:
        pass
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 5)", "UPDATE shop.orders SET state = 'overload' WHERE id = 2", "COMMIT")


def planted_operator(conn, dsn, n):
    run(conn, "CREATE FUNCTION app.yes_%s(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'" % n,
        "DROP OPERATOR IF EXISTS app.= (text, text)",
        "CREATE OPERATOR app.= (LEFTARG = text, RIGHTARG = text, FUNCTION = app.yes_%s)" % n,
        "CREATE OR REPLACE FUNCTION app.current_setting(text) RETURNS text LANGUAGE sql AS 'SELECT ''replica''::text'",
        "CREATE FUNCTION pg_temp.pg_current_xact_id() RETURNS xid8 LANGUAGE sql AS 'SELECT ''1''::xid8'",
        "SET search_path = app, pg_temp, pg_catalog, shop")
    try:
        run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 5)", "COMMIT")
    except psycopg2.Error:
        run(conn, "ROLLBACK")
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 51)", "UPDATE shop.orders SET state = 'planted' WHERE id = 1", "COMMIT")


def lock_marks(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:1', 10)", "LOCK TABLE fencegate.marks IN ACCESS EXCLUSIVE MODE",
        "UPDATE shop.orders SET state = 'locked' WHERE id = 2", "COMMIT")


def drop_schema(conn, dsn, n):
    for q in ["DROP SCHEMA fencegate CASCADE", "ALTER SCHEMA fencegate RENAME TO gone",
              "DROP FUNCTION fencegate.fence(text, bigint) CASCADE"]:
        try:
            run(conn, q)
        except psycopg2.Error:
            pass
    run(conn, "UPDATE shop.orders SET state = 'dropped' WHERE id = 1")


def disable_triggers(conn, dsn, n):
    for q in ["ALTER TABLE shop.orders DISABLE TRIGGER ALL", "ALTER TABLE shop.orders DISABLE TRIGGER USER",
              "CREATE RULE r AS ON UPDATE TO shop.orders DO INSTEAD NOTHING"]:
        try:
            run(conn, q)
        except psycopg2.Error:
            pass
    run(conn, "UPDATE shop.orders SET state = 'untriggered' WHERE id = 1")


def large_objects(conn, dsn, n):
    # Large objects are not protected (documented); what matters is that
    # writing one, in a read-only transaction or not, gets no protected row
    # written with it.
    run(conn, "BEGIN READ ONLY", "SELECT lo_from_bytea(0, 'x')", "COMMIT",
        "BEGIN", "SELECT fencegate.fence('order:2', 51)", "UPDATE shop.orders SET state = 'lo' WHERE id = 1", "COMMIT")


def lo_import(conn, dsn, n):
    run(conn, "SELECT lo_import('/etc/passwd')")


def truncate(conn, dsn, n):
    for t in ["shop.orders CASCADE", "shop.events", "shop.events_p0", "shop.ledger", "shop.ledger_2024"]:
        try:
            run(conn, "BEGIN", "SELECT fencegate.fence('order:1', 10)", "SELECT fencegate.fence('acct:5', 10)",
                "TRUNCATE " + t, "COMMIT")
        except psycopg2.Error:
            run(conn, "ROLLBACK")
    run(conn, "TRUNCATE shop.orders CASCADE")


def _lines(s):
    import io
    return io.StringIO(s)


def copy_in(conn, dsn, n):
    conn.autocommit = False
    try:
        cur = conn.cursor()
        cur.execute("SELECT fencegate.fence('order:2', 51)")
        cur.copy_expert("COPY shop.orders (id, customer, state, amount) FROM STDIN", _lines("100\t1\tcopied\t1\n"))
        conn.commit()
    finally:
        conn.rollback()
        conn.autocommit = True


def copy_partition(conn, dsn, n):
    conn.cursor().copy_expert("COPY shop.events_p0 (id, account, body) FROM STDIN", _lines("9\t5\tcopied\n"))


def partition_write(conn, dsn, n):
    for q in ["INSERT INTO shop.events_p0 VALUES (9, 5, 'direct')", "UPDATE shop.events_p1 SET body = 'p1' WHERE id = 100",
              "DELETE FROM shop.events_p0 WHERE id = 2"]:
        try:
            run(conn, "BEGIN", "SELECT fencegate.fence('order:1', 10)", q, "COMMIT")
        except psycopg2.Error:
            run(conn, "ROLLBACK")
    run(conn, "UPDATE shop.events_p0 SET body = 'p0' WHERE id = 1")


def partition_move(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('acct:5', 10)", "UPDATE shop.events SET account = 150 WHERE id = 1", "COMMIT")


def inheritance_child(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('acct:7', 10)", "UPDATE shop.ledger_2024 SET amt = 0 WHERE id = 2", "COMMIT")


def key_change(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:1', 10)", "UPDATE shop.orders SET id = 99 WHERE id = 1", "COMMIT")


def merge(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 51)",
        "MERGE INTO shop.orders o USING (VALUES (1)) v(id) ON o.id = v.id WHEN MATCHED THEN UPDATE SET state = 'merge'",
        "COMMIT")


def upsert(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 51)",
        "INSERT INTO shop.orders VALUES (1, 1, 'upsert', 0) ON CONFLICT (id) DO UPDATE SET state = 'upsert'", "COMMIT")


def cascade(conn, dsn, n):
    run(conn, "DELETE FROM shop.customers WHERE id = 1")


def own_view(conn, dsn, n):
    run(conn, "CREATE VIEW app.v_%s AS SELECT * FROM shop.orders" % n,
        "UPDATE app.v_%s SET state = 'view' WHERE id = 1" % n)


def own_rule(conn, dsn, n):
    run(conn, "CREATE TABLE app.t_%s (i int)" % n,
        "CREATE RULE r AS ON INSERT TO app.t_%s DO ALSO UPDATE shop.orders SET state = 'rule' WHERE id = 1" % n,
        "INSERT INTO app.t_%s VALUES (1)" % n)


def own_trigger(conn, dsn, n):
    run(conn, "CREATE TABLE app.u_%s (i int)" % n,
        "CREATE FUNCTION app.tr_%s() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN UPDATE shop.orders SET state = 'trigger' WHERE id = 1; RETURN NEW; END$$" % n,
        "CREATE TRIGGER t AFTER INSERT ON app.u_%s FOR EACH ROW EXECUTE FUNCTION app.tr_%s()" % (n, n),
        "INSERT INTO app.u_%s VALUES (1)" % n)


def security_definer(conn, dsn, n):
    run(conn, "CREATE FUNCTION app.sd_%s() RETURNS void LANGUAGE sql SECURITY DEFINER AS "
              "$$UPDATE shop.orders SET state = 'definer' WHERE id = 1$$" % n,
        "SELECT app.sd_%s()" % n)


def cursor(conn, dsn, n):
    run(conn, "BEGIN", "SELECT fencegate.fence('order:2', 51)",
        "DECLARE c CURSOR FOR SELECT * FROM shop.orders WHERE id = 1 FOR UPDATE", "FETCH c",
        "UPDATE shop.orders SET state = 'cursor' WHERE CURRENT OF c", "COMMIT")


def prepared_unrun(conn, dsn, n):
    run(conn, "BEGIN", "PREPARE f AS SELECT fencegate.fence($1, $2)",
        "UPDATE shop.orders SET state = 'prepared' WHERE id = 1", "COMMIT")


def leftover_statement(conn, dsn, n):
    # An earlier proxy prepared "fencegate_rw" in each session.
    try:
        run(conn, "BEGIN", "EXECUTE fencegate_rw")
    except psycopg2.Error:
        run(conn, "ROLLBACK")
        run(conn, "BEGIN")
    run(conn, "UPDATE shop.orders SET state = 'leftover' WHERE id = 1", "COMMIT")


def temp_trigger(conn, dsn, n):
    run(conn, "CREATE TEMP TABLE tmp (fencegate_resource text)")
    for fn in ["check_insert", "check_update", "check_delete", "check_row", "refuse_truncate"]:
        try:
            run(conn, "CREATE TRIGGER x_%s AFTER INSERT ON tmp FOR EACH ROW EXECUTE FUNCTION fencegate.%s()" % (fn, fn))
        except psycopg2.Error:
            pass
    run(conn, "INSERT INTO tmp VALUES ('order:1')", "UPDATE shop.orders SET state = 'temp' WHERE id = 1")


def prepared_transaction(conn, dsn, n):
    # A fence's transaction parked with PREPARE TRANSACTION and a write
    # after it in a new transaction of the same session.
    try:
        run(conn, "BEGIN", "SELECT fencegate.fence('order:1', 10)", "PREPARE TRANSACTION 'fg_%s'" % n)
    except psycopg2.Error:
        run(conn, "ROLLBACK")
    try:
        run(conn, "UPDATE shop.orders SET state = 'twophase' WHERE id = 1")
    finally:
        try:
            run(conn, "ROLLBACK PREPARED 'fg_%s'" % n)
        except psycopg2.Error:
            pass


def fence_many_mixed(conn, dsn, n):
    # One stale resource in a set-based fence: nothing of the set holds.
    try:
        run(conn, "BEGIN", "SELECT fencegate.fence_many(ARRAY['order:1', 'order:2'], 10)")
    except psycopg2.Error:
        run(conn, "ROLLBACK")
    run(conn, "BEGIN", "SELECT fencegate.fence_many(ARRAY['order:3', 'order:3'], 1)",
        "UPDATE shop.orders SET state = 'many' WHERE id = 1", "COMMIT")


def lookalike_resources(conn, dsn, n):
    # Resources compare byte for byte: case, spaces, zero padding, a
    # fullwidth colon, a zero-width space.
    for r in ["Order:1", "order:1 ", " order:1", "order:01", "order\uff1a1", "order:1\u200b"]:
        try:
            cur = conn.cursor()
            cur.execute("BEGIN")
            cur.execute("SELECT fencegate.fence(%s, 10)", (r,))
            cur.execute("UPDATE shop.orders SET state = 'lookalike' WHERE id = 1")
            cur.execute("COMMIT")
        except psycopg2.Error:
            run(conn, "ROLLBACK")
    run(conn, "BEGIN", "SELECT fencegate.fence(U&'order\\FF1A1', 10)",
        "UPDATE shop.orders SET state = 'fullwidth' WHERE id = 1", "COMMIT")


def become_owner(conn, dsn, n):
    for q in ["SET ROLE %s" % OWNER, "SET SESSION AUTHORIZATION %s" % OWNER, "SET ROLE postgres"]:
        try:
            run(conn, q)
        except psycopg2.Error:
            pass
    run(conn, "UPDATE shop.orders SET state = 'owner' WHERE id = 1")


ROUTES = [
    ("COMMIT AND CHAIN after a fence", chain("COMMIT AND CHAIN")),
    ("ROLLBACK AND CHAIN after a fence", chain("ROLLBACK AND CHAIN")),
    ("fence over generate_series(1, 0)", srf_fence),
    ("fence rolled back to a savepoint", savepoint_fence),
    ("FG001 caught in a savepoint, another fence standing", caught_stale),
    ("stale token", stale),
    ("typo'd resource", typo),
    ("fence on another resource", other_fence),
    ("no fence", unfenced),
    ("fence of an earlier transaction", earlier_tx),
    ("fence held by another session", other_session),
    ("DO block that commits", do_commit),
    ("procedure that commits", procedure_commit),
    ("SET U&\"transaction\\005Fread\\005Fonly\" = off", unicode_read_only),
    ("set_config with a name in pieces", set_config_pieces),
    ("session_replication_role = replica", replication_role),
    ("-- comment ended by a carriage return", cr_comment),
    ("standard_conforming_strings = off", backslash_strings),
    ("a backslash before a quote, standard strings", backslash_strings_on),
    ("several statements in one Query", multi_statement),
    ("fence in a CTE", cte_fence),
    ("fence in the WHERE clause", where_fence),
    ("writes to fencegate.marks", write_marks),
    ("COPY into fencegate.marks", copy_marks),
    ("CREATE OR REPLACE FUNCTION fencegate.fence", replace_fence),
    ("an overload fence(text, integer)", overload_fence),
    ("operator and functions planted in search_path", planted_operator),
    ("LOCK TABLE fencegate.marks", lock_marks),
    ("DROP SCHEMA fencegate CASCADE", drop_schema),
    ("disabling the triggers, a rule on the table", disable_triggers),
    ("large object in a read-only transaction", large_objects),
    ("lo_import of a server file", lo_import),
    ("TRUNCATE", truncate),
    ("COPY FROM STDIN (copy_expert)", copy_in),
    ("COPY FROM STDIN into a partition", copy_partition),
    ("writes aimed straight at a partition", partition_write),
    ("UPDATE moving a row to another partition", partition_move),
    ("write to an inheritance child", inheritance_child),
    ("UPDATE changing the row's resource", key_change),
    ("MERGE", merge),
    ("INSERT ... ON CONFLICT DO UPDATE", upsert),
    ("cascade from an unprotected table", cascade),
    ("view owned by the application", own_view),
    ("rule on an application table", own_rule),
    ("trigger on an application table", own_trigger),
    ("SECURITY DEFINER function of the application", security_definer),
    ("UPDATE WHERE CURRENT OF a cursor", cursor),
    ("fence prepared, never executed", prepared_unrun),
    ("the proxy's old fencegate_rw statement", leftover_statement),
    ("fencegate's trigger functions on a temp table", temp_trigger),
    ("PREPARE TRANSACTION after a fence", prepared_transaction),
    ("fence_many with a stale resource, and duplicates", fence_many_mixed),
    ("resources that look like the row's", lookalike_resources),
    ("SET ROLE / SESSION AUTHORIZATION to the owner", become_owner),
]


def main(argv):
    if len(argv) < 3 or any("=" not in a.split("://")[0] for a in argv[2:]):
        print("usage: bypass_routes.py ADMIN_DSN NAME=APP_DSN [NAME=APP_DSN...]", file=sys.stderr)
        return 2
    global OWNER
    admin = psycopg2.connect(argv[1])
    admin.autocommit = True
    cur = admin.cursor()
    cur.execute("SELECT quote_ident(nspowner::regrole::text) FROM pg_namespace WHERE nspname = 'shop'")
    OWNER = cur.fetchone()[0]
    paths = [a.split("=", 1) for a in argv[2:]]
    failed = 0
    for pi, (name, dsn) in enumerate(paths):
        for ri, (route, fn) in enumerate(ROUTES):
            rows, marks = snapshot(admin)
            conn = connect(dsn)
            try:
                fn(conn, dsn, "%d_%d" % (pi, ri))
                outcome = "no error"
            except psycopg2.Error as e:
                outcome = "%s %s" % (e.pgcode, (e.pgerror or str(e)).strip().splitlines()[0])
            finally:
                conn.close()
            after_rows, after_marks = snapshot(admin)
            bad = []
            if after_rows != rows:
                bad.append("protected rows changed: %s -> %s" % (
                    [r for r in rows if r not in after_rows], [r for r in after_rows if r not in rows]))
            for r, tok in marks.items():
                if after_marks.get(r, -1) < tok:
                    bad.append("mark %s went down from %d to %s" % (r, tok, after_marks.get(r)))
            status = "FAIL" if bad else "ok"
            if bad:
                failed += 1
            print("%-4s %-6s %-52s %s%s" % (status, name, route, outcome, "".join("\n     " + b for b in bad)))
    print("%d routes x %d paths, %d failed" % (len(ROUTES), len(paths), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
