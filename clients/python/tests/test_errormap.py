"""The error map of docs/protocol.md, row by row (lockclient/testdata/
error-map.json, which the Go and Node.js suites drive too), against the
real stack, straight to PostgreSQL and through the gate."""

import json
import os
import urllib.parse

import psycopg

from support import HERE, StackTest, env, unique

import fencegate

MAP = os.path.join(HERE, "..", "..", "..", "lockclient", "testdata", "error-map.json")

COMMIT_PROBE = """CREATE TEMP TABLE IF NOT EXISTS fg_commit_probe (x int);
CREATE OR REPLACE FUNCTION pg_temp.fg_raise() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'fencegate: raised at commit by the test' USING ERRCODE = current_setting('fg.code'); END $$;
DROP TRIGGER IF EXISTS fg_commit_probe_t ON fg_commit_probe;
CREATE CONSTRAINT TRIGGER fg_commit_probe_t AFTER INSERT ON fg_commit_probe DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION pg_temp.fg_raise()"""

KINDS = [
    (fencegate.CommitUnknownError, "commit_unknown"),
    (fencegate.StaleTokenError, "stale_token"),
    (fencegate.UnfencedWriteError, "unfenced"),
    (fencegate.FenceMisuseError, "fence_misuse"),
    (fencegate.FenceTimeoutError, "fence_timeout"),
    (fencegate.SchemaInvalidError, "schema_invalid"),
    (fencegate.ProtectedDDLError, "protected_ddl"),
    (fencegate.PrivilegedRoleError, "privileged_role"),
    (fencegate.BadProofError, "bad_proof"),
    (fencegate.FenceError, "fence_error"),
]


def kind(err):
    if err is None:
        return "ok"
    for cls, name in KINDS:
        if isinstance(err, cls):
            return name
    return "failed"


class ErrorMapTest(StackTest):
    def test_errormap(self):
        with open(MAP) as f:
            rows = json.load(f)["rows"]
        locks = self.lock_client(ttl=10)
        checks = 0
        for where, var in (("straight", "FENCEGATE_TEST_APP_DIRECT_DSN"), ("through the gate", "FENCEGATE_TEST_DSN")):
            conn = psycopg.connect(env(var), autocommit=True)
            self.addCleanup(conn.close)
            conn.execute(COMMIT_PROBE)
            conn.autocommit = False
            for row in rows:
                at, code, want = row["at"], row["sqlstate"], row.get("python", row["kind"])
                if at == "session" and where == "straight":
                    continue
                with self.subTest(path=where, at=at, sqlstate=code):
                    err = None
                    with locks.acquire(unique("errmap")) as lock:
                        try:
                            if at == "session":
                                # The administrator (a superuser) through the gate.
                                u = urllib.parse.urlsplit(env(var))
                                a = urllib.parse.urlsplit(env("FENCEGATE_TEST_ADMIN_DSN"))
                                dsn = urllib.parse.urlunsplit((u.scheme, a.netloc.rsplit("@", 1)[0] + "@" + u.netloc.rsplit("@", 1)[-1], u.path, u.query, u.fragment))
                                with fencegate.fence_errors(lock.resource, lock.token):
                                    psycopg.connect(dsn).close()
                            else:
                                with lock.transaction(conn) as cur:
                                    if at == "body":
                                        cur.execute(f"DO $$ BEGIN RAISE EXCEPTION 'fencegate: raised by the test' USING ERRCODE = '{code}'; END $$")
                                    else:
                                        cur.execute("SELECT set_config('fg.code', %s, true)", (code,))
                                        cur.execute("INSERT INTO fg_commit_probe VALUES (1)")
                        except Exception as e:  # noqa: BLE001 - judged below
                            err = e
                    self.assertEqual(kind(err), want, f"{code} at {at}: {type(err).__name__}: {err}")
                    checks += 1
        print(f"error map: {len(rows)} rows, {checks} checks passed", flush=True)
