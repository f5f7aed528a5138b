"""Fenced transactions: the write that lands, the stale one that does not,
every SQLSTATE, rollbacks, and a COMMIT whose answer never arrives."""

import socket
import threading
import urllib.parse

import psycopg

from support import StackTest, env, unique

import fencegate


class CommitCutter:
    """A TCP relay in front of the database that passes everything until the
    client sends COMMIT; it forwards the COMMIT, swallows the server's answer
    and closes the client's connection: the transaction commits and the
    client cannot know. With cut_on=b"UPDATE" it cuts before forwarding the
    first statement that contains UPDATE instead."""

    def __init__(self, case, dsn, cut_on=b"COMMIT", forward_cut=True):
        self.dsn_in = dsn
        u = urllib.parse.urlsplit(dsn)
        self.upstream = (u.hostname, u.port or 5432)
        self.cut_on, self.forward_cut = cut_on, forward_cut
        self.ls = socket.create_server(("127.0.0.1", 0))
        port = self.ls.getsockname()[1]
        netloc = u.netloc.rsplit("@", 1)
        netloc = (netloc[0] + "@" if len(netloc) == 2 else "") + f"127.0.0.1:{port}"
        self.dsn = urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))
        self.threads = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        case.addCleanup(self.close)

    def close(self):
        self.ls.close()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            s = socket.create_connection(self.upstream)
            cut = threading.Event()
            threading.Thread(target=self._up, args=(c, s, cut), daemon=True).start()
            threading.Thread(target=self._down, args=(s, c, cut), daemon=True).start()

    def _up(self, c, s, cut):
        try:
            while data := c.recv(65536):
                if data[:1] in (b"Q", b"P") and self.cut_on in data:
                    cut.set()
                    if self.forward_cut:
                        s.sendall(data)
                    else:
                        _shut(c, s)
                    return
                s.sendall(data)
        except OSError:
            pass
        _shut(c, s)

    def _down(self, s, c, cut):
        try:
            while data := s.recv(65536):
                if cut.is_set():
                    break  # the server answered the COMMIT: it committed
                c.sendall(data)
        except OSError:
            pass
        _shut(c, s)


def _shut(*socks):
    for x in socks:
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        x.close()


RAISE = "DO $$ BEGIN RAISE EXCEPTION 'fencegate: raised by the test' USING ERRCODE = '{code}', HINT = 'the hint'; END $$"


class FenceTest(StackTest):
    def test_fenced_write_commits(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        conn = self.connect()
        with locks.acquire("account:" + acct) as lock:
            with lock.transaction(conn) as cur:
                cur.execute("SELECT balance FROM accounts WHERE id = %s", (acct,))
                (bal,) = cur.fetchone()
                cur.execute("UPDATE accounts SET balance = %s WHERE id = %s", (bal - 30, acct))
        self.assertEqual(self.balance(acct), 70)

    def test_stale_token_is_refused_and_commits_nothing(self):
        short = self.lock_client(ttl=0.3)
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        res = "account:" + acct
        old = short.acquire(res)
        self.assertTrue(old.lost.wait(10))  # old stalls past its TTL
        with locks.acquire(res) as new:
            self.assertGreater(new.token, old.token)
            with new.transaction(self.connect()) as cur:
                cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (acct,))
        conn = self.connect()
        ran = []
        with self.assertRaises(fencegate.StaleTokenError) as cm:
            with old.transaction(conn) as cur:
                ran.append(True)
                cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (acct,))
        e = cm.exception
        self.assertEqual(ran, [], "the block ran although the fence refused the token")
        self.assertEqual((e.sqlstate, e.resource, e.token), ("FG001", res, old.token))
        self.assertFalse(e.retryable)
        self.assertIsInstance(e.__cause__, psycopg.Error)
        self.assertEqual(e.__cause__.sqlstate, "FG001")
        self.assertIn(str(old.token), str(e))
        self.assertEqual(self.balance(acct), 101)
        # The connection is usable again.
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        conn.rollback()

    def test_equal_tokens_are_accepted(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 0)
        conn = self.connect()
        with locks.acquire("account:" + acct) as lock:
            for _ in range(3):
                with lock.transaction(conn) as cur:
                    cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (acct,))
        self.assertEqual(self.balance(acct), 3)

    def test_unfenced_write_is_refused(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        conn = self.connect()
        with self.assertRaises(fencegate.UnfencedWriteError) as cm:
            with fencegate.fence_errors():
                with conn.cursor() as cur:
                    cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (acct,))
                conn.commit()
        self.assertEqual(cm.exception.sqlstate, "FG002")
        conn.rollback()
        self.assertEqual(self.balance(acct), 100)

    def test_unfenced_write_straight_to_postgresql_is_refused(self):
        # The table is protected by PostgreSQL itself: the same write, by the
        # same role, without the proxy, is refused as well.
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        conn = self.connect(dsn=env("FENCEGATE_TEST_APP_DIRECT_DSN"))
        for sql in ("UPDATE accounts SET balance = 0 WHERE id = %s", "DELETE FROM accounts WHERE id = %s"):
            with self.assertRaises(fencegate.UnfencedWriteError) as cm:
                with fencegate.fence_errors():
                    with conn.cursor() as cur:
                        cur.execute(sql, (acct,))
            self.assertEqual(cm.exception.sqlstate, "FG002")
            self.assertIn("accounts", str(cm.exception))
            conn.rollback()
        self.assertEqual(self.balance(acct), 100)

    def test_fence_guards_only_its_resource(self):
        locks = self.lock_client()
        mine, other = self.new_account(locks, 100), self.new_account(locks, 100)
        conn = self.connect()
        with locks.acquire("account:" + mine) as lock:
            with self.assertRaises(fencegate.UnfencedWriteError) as cm:
                with lock.transaction(conn) as cur:
                    cur.execute("UPDATE accounts SET balance = balance - 10 WHERE id = %s", (mine,))
                    cur.execute("UPDATE accounts SET balance = balance + 10 WHERE id = %s", (other,))
        self.assertEqual(cm.exception.sqlstate, "FG002")
        self.assertEqual((self.balance(mine), self.balance(other)), (100, 100))

    def test_fence_misuse(self):
        conn = self.connect()
        with self.assertRaises(fencegate.FenceMisuseError) as cm:
            with fencegate.fence_errors():
                with conn.cursor() as cur:
                    cur.execute(fencegate.FENCE_SQL, ("", 1))
        self.assertEqual(cm.exception.sqlstate, "FG003")
        conn.rollback()
        # A transaction already open: refused before anything is sent, as
        # the fence would not come first.
        locks = self.lock_client()
        with locks.acquire(unique("misuse")) as lock:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
            with self.assertRaises(fencegate.FenceMisuseError) as cm:
                with lock.transaction(conn):
                    self.fail("the block ran in a transaction the fence did not open")
            self.assertIsNone(cm.exception.sqlstate)
            conn.rollback()

    def test_every_sqlstate_has_its_exception(self):
        conn = self.connect(admin=True)
        want = {
            "FG001": fencegate.StaleTokenError,
            "FG002": fencegate.UnfencedWriteError,
            "FG003": fencegate.FenceMisuseError,
            "FG004": fencegate.FenceTimeoutError,
            "FG005": fencegate.SchemaInvalidError,
            "FG006": fencegate.ProtectedDDLError,
            "FG007": fencegate.PrivilegedRoleError,
            "FG008": fencegate.BadProofError,
            "FG099": fencegate.FenceError,  # a code this version does not know
        }
        for code, cls in want.items():
            with self.subTest(code=code):
                with self.assertRaises(fencegate.FenceError) as cm:
                    with fencegate.fence_errors("r", 5):
                        with conn.cursor() as cur:
                            cur.execute(RAISE.format(code=code))
                conn.rollback()
                e = cm.exception
                self.assertIs(type(e), cls)
                self.assertEqual((e.sqlstate, e.resource, e.token, e.hint), (code, "r", 5, "the hint"))
                self.assertEqual(e.retryable, code == "FG004")
                self.assertIn("raised by the test", str(e))
        # Other errors pass unchanged.
        with self.assertRaises(psycopg.errors.DivisionByZero):
            with fencegate.fence_errors():
                with conn.cursor() as cur:
                    cur.execute("SELECT 1/0")
        conn.rollback()

    def test_fence_error_inside_the_block_rolls_back(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        conn = self.connect()
        with locks.acquire("account:" + acct) as lock:
            with self.assertRaises(fencegate.FenceTimeoutError):
                with lock.transaction(conn) as cur:
                    cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (acct,))
                    cur.execute(RAISE.format(code="FG004"))
        self.assertEqual(self.balance(acct), 100)

    def test_exception_in_the_block_rolls_back(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        conn = self.connect()
        with locks.acquire("account:" + acct) as lock:
            with self.assertRaises(KeyError):
                with lock.transaction(conn) as cur:
                    cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (acct,))
                    raise KeyError("the application changed its mind")
        self.assertEqual(self.balance(acct), 100)
        self.assertEqual(conn.info.transaction_status, psycopg.pq.TransactionStatus.IDLE)

    def test_error_caught_inside_the_block_commits_nothing(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        conn = self.connect()
        with locks.acquire("account:" + acct) as lock:
            with self.assertRaises(fencegate.TransactionAbortedError):
                with lock.transaction(conn) as cur:
                    cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (acct,))
                    try:
                        cur.execute("SELECT 1/0")
                    except psycopg.Error:
                        pass  # and the block goes on
        self.assertEqual(self.balance(acct), 100)

    def test_autocommit_connection(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        conn = self.connect()
        conn.autocommit = True
        with locks.acquire("account:" + acct) as lock:
            with lock.transaction(conn) as cur:
                cur.execute("UPDATE accounts SET balance = 1 WHERE id = %s", (acct,))
        self.assertTrue(conn.autocommit)
        self.assertEqual(self.balance(acct), 1)

    def test_transfer_under_two_locks(self):
        locks = self.lock_client()
        a, b = self.new_account(locks, 100), self.new_account(locks, 0)
        conn = self.connect()
        with locks.acquire("account:" + a) as la, locks.acquire("account:" + b) as lb:
            with fencegate.transaction(conn, la, lb) as cur:
                cur.execute("UPDATE accounts SET balance = balance - 30 WHERE id = %s", (a,))
                cur.execute("UPDATE accounts SET balance = balance + 30 WHERE id = %s", (b,))
        self.assertEqual((self.balance(a), self.balance(b)), (70, 30))
        with self.assertRaises(fencegate.FenceMisuseError):
            with fencegate.transaction(conn, la, la):
                self.fail("ran with one lock given twice")

    def test_one_stale_lock_of_two_commits_nothing(self):
        locks, short = self.lock_client(), self.lock_client(ttl=0.3)
        a, b = self.new_account(locks, 100), self.new_account(locks, 0)
        la = locks.acquire("account:" + a)
        self.addCleanup(la.release)
        lb = short.acquire("account:" + b)
        self.assertTrue(lb.lost.wait(10))
        with locks.acquire("account:" + b) as newer:
            with newer.transaction(self.connect()) as cur:
                cur.execute("UPDATE accounts SET balance = 5 WHERE id = %s", (b,))
        with self.assertRaises(fencegate.StaleTokenError) as cm:
            with fencegate.transaction(self.connect(), la, lb) as cur:
                cur.execute("UPDATE accounts SET balance = balance - 30 WHERE id = %s", (a,))
                cur.execute("UPDATE accounts SET balance = balance + 30 WHERE id = %s", (b,))
        self.assertEqual((cm.exception.resource, cm.exception.token), ("account:" + b, lb.token))
        self.assertEqual((self.balance(a), self.balance(b)), (100, 5))

    def test_fences_are_taken_in_one_order(self):
        # Two transactions fence the same two resources, given in opposite
        # orders, again and again: fenced in the order given they would
        # deadlock (40P01); sorted, they wait for each other.
        locks = self.lock_client(ttl=30)
        a, b = self.new_account(locks, 0), self.new_account(locks, 0)
        la, lb = locks.acquire("account:" + a), locks.acquire("account:" + b)
        self.addCleanup(la.release)
        self.addCleanup(lb.release)
        errors = []

        def work(first, second):
            conn = self.connect()
            try:
                for _ in range(20):
                    with fencegate.transaction(conn, first, second) as cur:
                        cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (a,))
                        cur.execute("SELECT pg_sleep(0.002)")
                        cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (b,))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=p) for p in ((la, lb), (lb, la))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(errors, [])
        self.assertEqual((self.balance(a), self.balance(b)), (40, 40))

    def test_commit_outcome_unknown_and_the_idempotent_redo(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        relay = CommitCutter(self, env("FENCEGATE_TEST_DSN"))
        conn = self.connect(dsn=relay.dsn)
        req = unique("req")

        def pay(conn):
            # Idempotent: the request id is written with the change, so a
            # redo finds it and does nothing.
            with lock.transaction(conn) as cur:
                cur.execute("SELECT 1 FROM requests WHERE id = %s", (req,))
                if cur.fetchone():
                    return "already done"
                cur.execute("INSERT INTO requests (id, account, amount) VALUES (%s, %s, -10)", (req, acct))
                cur.execute("UPDATE accounts SET balance = balance - 10 WHERE id = %s", (acct,))
                return "done"

        with locks.acquire("account:" + acct) as lock:
            with self.assertRaises(fencegate.CommitUnknownError) as cm:
                pay(conn)
            self.assertEqual((cm.exception.resource, cm.exception.token), ("account:" + acct, lock.token))
            # The COMMIT reached the server; only its answer was lost.
            self.assertEqual(self.balance(acct), 90)
            self.assertEqual(pay(self.connect()), "already done")
        self.assertEqual(self.balance(acct), 90)

    def test_connection_lost_before_commit_is_a_plain_error(self):
        locks = self.lock_client()
        acct = self.new_account(locks, 100)
        relay = CommitCutter(self, env("FENCEGATE_TEST_DSN"), cut_on=b"UPDATE", forward_cut=False)
        conn = self.connect(dsn=relay.dsn)
        with locks.acquire("account:" + acct) as lock:
            with self.assertRaises(psycopg.OperationalError):
                with lock.transaction(conn) as cur:
                    cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (acct,))
        self.assertEqual(self.balance(acct), 100)
