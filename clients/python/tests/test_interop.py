"""Go and Python contend for the same locks: a Go lockclient (the Go peer,
driven over HTTP) and this client must see each other's grants, never hold
one lock together, and fence each other's stale writes."""

import threading
import time

from support import StackTest, env, key_prefix, peer, redlock_urls, unique

import fencegate


class InteropTest(StackTest):
    def go(self, path, **body):
        body.setdefault("prefix", key_prefix())
        return peer(path, **body)

    def go_release(self, res, **body):
        status, out = self.go("/release", resource=res, **body)
        self.assertEqual(status, 200, out)

    def test_a_go_lock_keeps_python_out_and_back(self):
        locks = self.lock_client()
        res = unique("interop")
        status, out = self.go("/try", resource=res)
        self.assertEqual(status, 200, out)
        self.assertEqual(out["key"], key_prefix() + res)
        with self.assertRaises(fencegate.NotAcquiredError) as cm:
            locks.try_acquire(res)
        self.assertEqual(cm.exception.taken, locks.nodes)
        self.go_release(res)
        lock = locks.try_acquire(res)
        self.assertGreater(lock.token, out["token"])
        status, out = self.go("/try", resource=res)
        self.assertEqual(status, 409, out)
        self.assertTrue(out["not_acquired"], out)
        lock.release()
        status, out = self.go("/try", resource=res)
        self.assertEqual(status, 200, out)
        self.go_release(res)

    def test_same_key_and_value_format(self):
        locks = self.lock_client()
        res = unique("format")
        status, out = self.go("/try", resource=res)
        self.assertEqual(status, 200, out)
        go_value = out["values"][0]
        self.go_release(res)
        with locks.acquire(res):
            py_value = self.redis().get(key_prefix() + res).decode()
        for v in (go_value, py_value):
            self.assertRegex(v, r"^[0-9a-f]{32}$")

    def test_a_non_ascii_resource_is_the_same_lock(self):
        locks = self.lock_client()
        res = unique("konto:Zürich/ø 東京")
        status, out = self.go("/try", resource=res)
        self.assertEqual(status, 200, out)
        self.assertEqual(self.redis().get((key_prefix() + res).encode()).decode(), out["values"][0])
        with self.assertRaises(fencegate.NotAcquiredError):
            locks.try_acquire(res)
        self.go_release(res)
        with locks.acquire(res):
            status, out = self.go("/try", resource=res)
            self.assertEqual(status, 409, out)

    def test_default_key_prefix_agrees(self):
        # Neither side is told a prefix: both must use "fencegate:lock:".
        locks = self.lock_client(key_prefix=fencegate.DEFAULT_KEY_PREFIX)
        res = unique("pytest-default")
        status, out = peer("/try", resource=res)
        self.assertEqual(status, 200, out)
        self.assertEqual(out["key"], "fencegate:lock:" + res)
        try:
            with self.assertRaises(fencegate.NotAcquiredError):
                locks.try_acquire(res)
        finally:
            status, out = peer("/release", resource=res)
            self.assertEqual(status, 200, out)
        locks.try_acquire(res).release()

    def test_redlock_go_and_python(self):
        locks = self.lock_client(redis_urls=redlock_urls())
        res = unique("interop-rl")
        status, out = self.go("/try", resource=res, redlock=True)
        self.assertEqual(status, 200, out)
        self.assertEqual(len(set(out["values"])), 1, out)
        with self.assertRaises(fencegate.NotAcquiredError) as cm:
            locks.try_acquire(res)
        self.assertGreaterEqual(len(cm.exception.taken), 2)
        self.go_release(res, redlock=True)
        with locks.acquire(res):
            status, out = self.go("/try", resource=res, redlock=True)
            self.assertEqual(status, 409, out)

    def test_go_and_python_contend_for_one_resource(self):
        for redlock in (False, True):
            with self.subTest(redlock=redlock):
                self.contend(redlock)

    def contend(self, redlock, n=40):
        urls = redlock_urls() if redlock else None
        locks = self.lock_client(**({"redis_urls": urls} if urls else {}))
        ctr = self.new_counter(self.lock_client())
        res = "counter:" + ctr
        inside = env("FENCEGATE_TEST_KEY_PREFIX") + "inside:" + ctr
        r = self.redis()
        conn = self.connect()
        go_result = {}

        def go_side():
            go_result["answer"] = self.go(
                "/contend", resource=res, redlock=redlock, n=n, inside=inside, counter=ctr
            )

        t = threading.Thread(target=go_side)
        t.start()
        py_tokens, overlaps = [], 0
        for _ in range(n):
            with locks.acquire(res) as lock:
                if r.incr(inside) != 1:
                    overlaps += 1
                with lock.transaction(conn) as cur:
                    cur.execute("UPDATE counters SET n = n + 1 WHERE id = %s", (ctr,))
                r.decr(inside)
                py_tokens.append(lock.token)
            time.sleep(0.005)  # work between holds, as the Go side does
        t.join()
        status, out = go_result["answer"]
        self.assertEqual(status, 200, out)
        go_tokens = out["tokens"]
        self.assertEqual((overlaps, out["overlaps"]), (0, 0), "Go and Python held the lock at the same time")
        self.assertEqual(self.query("SELECT n FROM counters WHERE id = %s", (ctr,))[0][0], 2 * n)
        self.assertEqual(py_tokens, sorted(py_tokens))
        self.assertEqual(go_tokens, sorted(go_tokens))
        self.assertEqual(len(set(py_tokens) | set(go_tokens)), 2 * n, "a token was handed out twice")
        # They really contended: each side held the lock between two of the
        # other's holds.
        self.assertLess(min(go_tokens), max(py_tokens))
        self.assertLess(min(py_tokens), max(go_tokens))

    def test_a_stale_go_holder_is_fenced_out_by_a_python_write(self):
        locks = self.lock_client()
        acct = self.new_account(self.lock_client(), 100)
        res = "account:" + acct
        status, out = self.go("/try", resource=res, ttl_ms=300)
        self.assertEqual(status, 200, out)
        go_token = out["token"]
        # The Go holder stalls past its TTL; Python takes the lock and writes.
        with locks.acquire(res, timeout=10) as lock:
            self.assertGreater(lock.token, go_token)
            with lock.transaction(self.connect()) as cur:
                cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (acct,))
        status, out = self.go("/write", resource=res, account=acct, delta=-100)
        self.assertEqual(status, 409, out)
        self.assertTrue(out["stale"], out)
        self.assertEqual(self.balance(acct), 101)
        self.go("/release", resource=res)

    def test_a_stale_python_holder_is_fenced_out_by_a_go_write(self):
        short = self.lock_client(ttl=0.3)
        acct = self.new_account(self.lock_client(), 100)
        res = "account:" + acct
        lock = short.acquire(res)
        self.assertTrue(lock.lost.wait(10))
        status, out = self.go("/acquire", resource=res)
        self.assertEqual(status, 200, out)
        self.assertGreater(out["token"], lock.token)
        status, out = self.go("/write", resource=res, account=acct, delta=7)
        self.assertEqual(status, 200, out)
        self.go_release(res)
        with self.assertRaises(fencegate.StaleTokenError):
            with lock.transaction(self.connect()) as cur:
                cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (acct,))
        self.assertEqual(self.balance(acct), 107)
