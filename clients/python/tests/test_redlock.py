"""Redlock over three independent redis-servers: quorum, cleanup on failure
on every master, slow and dead masters, and a master that forgets the key."""

import time

from support import StackTest, closed_port, redlock_urls, unique

import fencegate

PREFIX = "pytest:redlock:"


class RedlockTest(StackTest):
    def redlock(self, urls=None, **kw):
        return self.lock_client(redis_urls=urls or redlock_urls(), key_prefix=PREFIX, **kw)

    def values(self, res):
        return [self.redis(u).get(PREFIX + res) for u in redlock_urls()]

    def test_quorum_and_the_same_value_on_every_master(self):
        locks = self.redlock()
        self.assertEqual(locks.quorum, 2)
        res = unique("rl")
        lock = locks.acquire(res)
        vals = self.values(res)
        self.assertEqual(len(set(vals)), 1, vals)
        self.assertRegex(vals[0].decode(), r"^[0-9a-f]{32}$")
        for u in redlock_urls():
            self.assertTrue(0 < self.redis(u).pttl(PREFIX + res) <= 2000)
        lock.release()
        self.assertEqual(self.values(res), [None, None, None])

    def test_one_master_down_still_grants(self):
        urls = redlock_urls()[:2] + [f"redis://127.0.0.1:{closed_port()}"]
        locks = self.redlock(urls)
        with locks.acquire(unique("rl")) as lock:
            self.assertGreater(lock.token, 0)
            lock.refresh()

    def test_two_masters_down_fails_at_once_and_leaves_nothing(self):
        urls = redlock_urls()[:1] + [f"redis://127.0.0.1:{closed_port()}" for _ in range(2)]
        locks = self.redlock(urls)
        res = unique("rl")
        with self.assertRaises(fencegate.NotAcquiredError) as cm:
            locks.try_acquire(res)
        e = cm.exception
        self.assertEqual(len(e.failed), 2)
        self.assertIn("connection refused", str(e))
        self.assertIsNone(self.redis(urls[0]).get(PREFIX + res), "a failed attempt left its key behind")

    def test_held_on_a_majority_elsewhere_cleans_up_the_minority(self):
        locks = self.redlock()
        res = unique("rl")
        urls = redlock_urls()
        for u in urls[:2]:
            self.redis(u).set(PREFIX + res, "someone-else", px=10000)
        with self.assertRaises(fencegate.NotAcquiredError) as cm:
            locks.try_acquire(res)
        self.assertEqual(len(cm.exception.taken), 2)
        self.assertEqual(self.values(res), [b"someone-else", b"someone-else", None])

    def test_slow_master_counts_as_failed(self):
        urls = redlock_urls()
        slow = self.redis(urls[0])
        slow.execute_command("CLIENT", "PAUSE", "3000", "WRITE")
        self.addCleanup(slow.execute_command, "CLIENT", "UNPAUSE")
        locks = self.redlock(node_timeout=0.3)
        res = unique("rl")
        lock = locks.acquire(res)
        returned = time.monotonic()
        # The quorum came from the two fast masters. The validity counts
        # from the start of the last round (the confirming extend), which
        # began before acquire returned, less the drift allowance
        # (TTL x drift_factor 0.01 + 2 ms): never from the answer.
        self.assertLessEqual(lock.valid_until, returned + locks.ttl * 0.99 - 0.002)
        self.assertGreater(lock.token, 0)
        lock.release()

    def test_refresh_refused_by_a_majority_is_a_loss(self):
        locks = self.redlock(ttl=5.0)
        res = unique("rl")
        lock = locks.acquire(res)
        for u in redlock_urls()[:2]:
            self.redis(u).set(PREFIX + res, "someone-else", px=10000)
        with self.assertRaises(fencegate.LockLostError):
            lock.refresh()
        self.assertTrue(lock.lost.is_set())

    def test_refresh_with_one_master_changed_stays_held(self):
        locks = self.redlock(ttl=5.0)
        res = unique("rl")
        lock = locks.acquire(res)
        self.addCleanup(lambda: lock.release() if lock.held else None)
        self.redis(redlock_urls()[0]).set(PREFIX + res, "someone-else", px=10000)
        lock.refresh()
        self.assertFalse(lock.lost.is_set())

    def test_masters_that_forget_the_key_are_caught_by_the_fence(self):
        # Two masters restart without persistence while A holds the lock: B
        # is granted it too (the double grant Redlock allows). B's token is
        # larger, so once B has written, A's transaction is refused.
        locks = self.redlock(ttl=10.0)
        acct = self.new_account(self.lock_client(), 100)
        res = "account:" + acct
        a = locks.acquire(res)
        for u in redlock_urls()[:2]:
            self.redis(u).delete(PREFIX + res)
        b = locks.acquire(res)
        self.assertFalse(a.lost.is_set(), "A cannot know")
        self.assertGreater(b.token, a.token)
        with b.transaction(self.connect()) as cur:
            cur.execute("UPDATE accounts SET balance = balance + 5 WHERE id = %s", (acct,))
        with self.assertRaises(fencegate.StaleTokenError):
            with a.transaction(self.connect()) as cur:
                cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (acct,))
        self.assertEqual(self.balance(acct), 105)
        b.release()
