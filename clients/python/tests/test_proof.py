"""Signed tokens: a lock keeps the proof the token service returns beside its
token and passes it to the fence; a database that requires signed tokens
accepts that write, refuses a forged proof (BadProofError, FG008) and a
fence without proof (FenceMisuseError, FG003), and advances nothing when it
refuses."""

import hashlib
import hmac
import re
import struct
import types

from support import StackTest, env, token_servers, unique

import fencegate

PROOF_RE = re.compile(r"[A-Za-z0-9_-]{1,64}\.[0-9a-f]{64}")


def expected_proof(resource: str, token: int) -> str:
    """The proof as docs/protocol.md ("Proofs") defines it, computed from the
    key file the token service and the database were given."""
    with open(env("FENCEGATE_TEST_SIGNING_KEYS")) as f:
        key_id, key_hex = next(ln.split() for ln in f if ln.strip() and not ln.startswith("#"))
    cid = env("FENCEGATE_TEST_SIGNING_CLUSTER_ID").encode()
    res = resource.encode()
    msg = b"fencegate-proof-v1" + struct.pack(">I", len(cid)) + cid + struct.pack(">I", len(res)) + res
    msg += struct.pack(">q", token)
    return key_id + "." + hmac.new(bytes.fromhex(key_hex), msg, hashlib.sha256).hexdigest()


def forge(proof: str) -> str:
    """The proof with its last hex digit changed: well formed, never valid."""
    return proof[:-1] + ("0" if proof[-1] != "0" else "1")


class SignedTokenTest(StackTest):
    def signed_locks(self, **kw) -> fencegate.LockClient:
        return self.lock_client(token_servers=env("FENCEGATE_TEST_SIGNED_TOKEN_SERVERS").split(","), **kw)

    def signed_conn(self):
        return self.connect(dsn=env("FENCEGATE_TEST_SIGNED_DSN"))

    def mark(self, resource: str):
        rows = self.query_signed("SELECT token FROM fencegate.marks WHERE resource = %s", (resource,))
        return rows[0][0] if rows else None

    def ledger(self, entry: str):
        return self.query_signed("SELECT holder, token FROM ledger WHERE id = %s", (entry,))

    def query_signed(self, sql, args=()):
        conn = self.connect(dsn=env("FENCEGATE_TEST_SIGNED_ADMIN_DSN"))
        with conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def write(self, lock, entry: str, holder: str) -> None:
        with lock.transaction(self.signed_conn()) as cur:
            cur.execute(
                "INSERT INTO ledger (id, holder, token) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, token = excluded.token",
                (entry, holder, lock.token),
            )

    def test_signed_write_accepted(self):
        locks = self.signed_locks()
        entry = unique("e")
        with locks.acquire("ledger:" + entry) as lock:
            self.assertIsNotNone(lock.proof, "a lock from a signing token service carries a proof")
            self.assertRegex(lock.proof, PROOF_RE)
            self.assertEqual(lock.proof, expected_proof(lock.resource, lock.token))
            self.write(lock, entry, "a")
        self.assertEqual(self.ledger(entry), [("a", lock.token)])
        self.assertEqual(self.mark("ledger:" + entry), lock.token)

        # The token client itself: Token.proof and next_signed.
        tc = fencegate.TokenClient(env("FENCEGATE_TEST_SIGNED_TOKEN_SERVERS").split(","))
        self.addCleanup(tc.close)
        t = tc.next("ledger:" + entry)
        self.assertEqual(t.proof, expected_proof(t.resource, t.value))
        tok, proof = tc.next_signed("ledger:" + entry)
        self.assertGreater(tok, t.value)
        self.assertEqual(proof, expected_proof("ledger:" + entry, tok))

    def test_forged_proof_refused(self):
        locks = self.signed_locks()
        entry = unique("e")
        resource = "ledger:" + entry
        with locks.acquire(resource) as first:
            self.write(first, entry, "first")
        with locks.acquire(resource) as lock:
            self.assertGreater(lock.token, first.token)
            lock.proof = forge(lock.proof)
            with self.assertRaises(fencegate.BadProofError) as cm:
                self.write(lock, entry, "forged")
        e = cm.exception
        self.assertIsInstance(e, fencegate.FenceError)
        self.assertIsInstance(e, fencegate.Error)
        self.assertEqual(e.sqlstate, "FG008")
        self.assertEqual((e.resource, e.token), (resource, lock.token))
        self.assertFalse(e.retryable)
        self.assertIs(fencegate.FENCE_ERRORS["FG008"], fencegate.BadProofError)
        # Nothing advanced: the mark is the first holder's, its row stands.
        self.assertEqual(self.mark(resource), first.token)
        self.assertEqual(self.ledger(entry), [("first", first.token)])

    def test_proof_of_another_resource_refused(self):
        locks = self.signed_locks()
        entry, other = unique("e"), unique("other")
        with locks.acquire("ledger:" + entry) as first:
            self.write(first, entry, "first")
        with locks.acquire("ledger:" + other) as theirs:
            pass
        # A valid token and proof, minted for another resource.
        foreign = types.SimpleNamespace(resource="ledger:" + entry, token=theirs.token, proof=theirs.proof)
        self.assertGreater(foreign.token, first.token)
        with self.assertRaises(fencegate.BadProofError):
            with fencegate.transaction(self.signed_conn(), foreign) as cur:
                cur.execute("UPDATE ledger SET holder = 'foreign' WHERE id = %s", (entry,))
        self.assertEqual(self.mark("ledger:" + entry), first.token)
        self.assertEqual(self.ledger(entry), [("first", first.token)])

    def test_malformed_proof_is_misuse(self):
        locks = self.signed_locks()
        entry = unique("e")
        with locks.acquire("ledger:" + entry) as lock:
            lock.proof = "not-a-proof"
            with self.assertRaises(fencegate.FenceMisuseError) as cm:
                self.write(lock, entry, "malformed")
        self.assertEqual(cm.exception.sqlstate, "FG003")
        self.assertIn("malformed", str(cm.exception))
        self.assertIsNone(self.mark("ledger:" + entry))
        self.assertEqual(self.ledger(entry), [])

    def test_unsigned_token_refused(self):
        # The main token service does not sign: its locks carry no proof and
        # fence with two arguments, which this database refuses.
        locks = self.lock_client(token_servers=token_servers())
        entry = unique("e")
        resource = "ledger:" + entry
        with locks.acquire(resource) as lock:
            self.assertIsNone(lock.proof)
            with self.assertRaises(fencegate.FenceMisuseError) as cm:
                self.write(lock, entry, "unsigned")
        e = cm.exception
        self.assertEqual(e.sqlstate, "FG003")
        self.assertIn("signed", str(e))
        self.assertIsNone(self.mark(resource))
        self.assertEqual(self.ledger(entry), [])

    def test_source_without_proofs(self):
        # A token source that only has next_token: the lock has no proof.
        real = fencegate.TokenClient(env("FENCEGATE_TEST_SIGNED_TOKEN_SERVERS").split(","))
        self.addCleanup(real.close)

        class Plain:
            def next_token(self, resource, timeout=None):
                return real.next_token(resource, timeout)

        locks = self.lock_client(token_servers=None, token_source=Plain())
        entry = unique("e")
        with locks.acquire("ledger:" + entry) as lock:
            self.assertIsNone(lock.proof)
            with self.assertRaises(fencegate.FenceMisuseError):
                self.write(lock, entry, "plain")
        self.assertEqual(self.ledger(entry), [])

    def test_several_signed_locks_in_one_transaction(self):
        locks = self.signed_locks()
        a, b = unique("a"), unique("b")
        with locks.acquire("ledger:" + a) as la, locks.acquire("ledger:" + b) as lb:
            with fencegate.transaction(self.signed_conn(), lb, la) as cur:
                cur.execute("INSERT INTO ledger (id, holder, token) VALUES (%s, 'x', %s)", (a, la.token))
                cur.execute("INSERT INTO ledger (id, holder, token) VALUES (%s, 'x', %s)", (b, lb.token))
        self.assertEqual((self.mark("ledger:" + a), self.mark("ledger:" + b)), (la.token, lb.token))
        # One forged proof among them: BadProofError, nothing of either advanced.
        with locks.acquire("ledger:" + a) as la2, locks.acquire("ledger:" + b) as lb2:
            lb2.proof = forge(lb2.proof)
            with self.assertRaises(fencegate.BadProofError) as cm:
                with fencegate.transaction(self.signed_conn(), la2, lb2) as cur:
                    cur.execute("UPDATE ledger SET holder = 'y' WHERE id IN (%s, %s)", (a, b))
        self.assertEqual((cm.exception.resource, cm.exception.token), ("ledger:" + b, lb2.token))
        self.assertEqual((self.mark("ledger:" + a), self.mark("ledger:" + b)), (la.token, lb.token))
        self.assertEqual(self.query_signed("SELECT DISTINCT holder FROM ledger WHERE id IN (%s, %s)", (a, b)), [("x",)])

    def test_proofs_on_a_database_that_does_not_require_them(self):
        # Rollout order: keys on the token service first. The database that
        # does not require proofs yet takes the three-argument fence.
        locks = self.signed_locks()
        acct = self.new_account(locks, 70)
        self.assertEqual(self.balance(acct), 70)
        with locks.acquire("account:" + acct) as lock:
            self.assertIsNotNone(lock.proof)
            with lock.transaction(self.connect()) as cur:
                cur.execute("UPDATE accounts SET balance = balance - 20 WHERE id = %s", (acct,))
        self.assertEqual(self.balance(acct), 50)

    def test_proof_is_not_in_statement_text(self):
        """While a signed fence's transaction is open, pg_stat_activity shows
        the fence statement of the session with placeholders, never the
        proof (a bearer credential while its token is current). psycopg2,
        which writes parameters into the text, is refused for a proof."""
        locks = self.signed_locks()
        res = unique("bound")
        conn = self.signed_conn()
        with locks.acquire(res) as lock:
            self.assertTrue(lock.proof)
            with lock.transaction(conn):
                rows = self.query_signed(
                    "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND query LIKE %s",
                    ("%fencegate.fence%",),
                )
            self.assertTrue(rows, "the fence statement is not in pg_stat_activity")
            for (q,) in rows:
                self.assertNotIn(lock.proof, q)
                self.assertNotIn(lock.proof.split(".")[1], q)
            print(f"pg_stat_activity during a signed fence: {rows}", flush=True)
            import psycopg2

            old = psycopg2.connect(env("FENCEGATE_TEST_SIGNED_DSN"))
            self.addCleanup(old.close)
            with self.assertRaises(fencegate.FenceMisuseError):
                with lock.transaction(old):
                    pass

