"""What a fenced transaction reports when the session breaks around COMMIT,
on psycopg (3) and on psycopg2, straight to PostgreSQL and between the gate
and PostgreSQL (the Go test puts a cutter there, armed through
FENCEGATE_TEST_CUT_CONTROL): cut before COMMIT was sent, a plain failure
and nothing committed; after COMMIT reached the server, CommitUnknownError
and it committed (through the gate the client reads the gate's FATAL
08006); after the answer, success. A session PostgreSQL ended while the
block ran (pg_terminate_backend) is a plain failure: COMMIT was never sent.
"""

import select
import urllib.request

import psycopg
import psycopg2

from support import StackTest, env

import fencegate

DRIVERS = {"psycopg": psycopg.connect, "psycopg2": psycopg2.connect}
PATHS = {"straight": "FENCEGATE_TEST_CUT_DIRECT_DSN", "through the gate": "FENCEGATE_TEST_CUT_GATE_DSN"}


def control(path: str) -> None:
    req = urllib.request.Request(env("FENCEGATE_TEST_CUT_CONTROL") + path, method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=30) as resp:
        if resp.status >= 300:
            raise RuntimeError(f"cut control {path}: {resp.status}")


class OutcomeTest(StackTest):
    def test_link_cut_around_commit(self):
        locks = self.lock_client(ttl=10)
        for driver, connect in DRIVERS.items():
            for where, var in PATHS.items():
                for point in ("before", "after-server", "after-answer"):
                    with self.subTest(driver=driver, path=where, point=point):
                        acct = self.new_account(locks, 100)
                        conn = connect(env(var))
                        self.addCleanup(conn.close)
                        word = "UPDATE%20accounts" if point == "before" else "COMMIT"
                        err = None
                        with locks.acquire("account:" + acct) as lock:
                            control(f"/arm?word={word}&point={point}")
                            try:
                                with lock.transaction(conn) as cur:
                                    cur.execute("UPDATE accounts SET balance = balance - 10 WHERE id = %s", (acct,))
                            except Exception as e:  # noqa: BLE001 - judged below
                                err = e
                            control("/fired")
                        balance = self.balance(acct)
                        got = f"{type(err).__name__}: {err}; balance {balance}"
                        if point == "before":
                            self.assertIsNotNone(err, got)
                            self.assertNotIsInstance(err, (fencegate.CommitUnknownError, fencegate.FenceError), got)
                            self.assertEqual(balance, 100, got)
                        elif point == "after-server":
                            self.assertIsInstance(err, fencegate.CommitUnknownError, got)
                            self.assertEqual(balance, 90, got)
                        else:
                            self.assertIsNone(err, got)
                            self.assertEqual(balance, 90, got)

    def test_session_killed_before_commit_is_a_plain_failure(self):
        locks = self.lock_client(ttl=10)
        for driver, connect in DRIVERS.items():
            for where, var in (("straight", "FENCEGATE_TEST_APP_DIRECT_DSN"), ("through the gate", "FENCEGATE_TEST_DSN")):
                with self.subTest(driver=driver, path=where):
                    acct = self.new_account(locks, 100)
                    conn = connect(env(var))
                    self.addCleanup(conn.close)
                    err = None
                    with locks.acquire("account:" + acct) as lock:
                        try:
                            with lock.transaction(conn) as cur:
                                cur.execute("UPDATE accounts SET balance = balance - 10 WHERE id = %s", (acct,))
                                cur.execute("SELECT pg_backend_pid()")
                                pid = cur.fetchone()[0]
                                self.query("SELECT pg_terminate_backend(%s)", (pid,))
                                # The server's FATAL has reached this side of
                                # the connection before COMMIT is sent.
                                ready, _, _ = select.select([conn.fileno()], [], [], 30)
                                self.assertTrue(ready, "no FATAL came from the terminated backend")
                        except Exception as e:  # noqa: BLE001 - judged below
                            err = e
                    got = f"{type(err).__name__}: {err}"
                    self.assertIsNotNone(err, got)
                    self.assertNotIsInstance(err, fencegate.CommitUnknownError, got)
                    self.assertEqual(self.balance(acct), 100, got)
