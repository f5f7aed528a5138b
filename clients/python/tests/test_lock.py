"""The Redis lock on one node: the wire format, the lease, refresh, release."""

import os
import re
import threading
import time

from support import StackTest, closed_port, env, key_prefix, redis_url, redlock_urls, token_servers, unique, wait_until

import fencegate


class SingleNodeLockTest(StackTest):
    def test_key_value_and_ttl_on_the_wire(self):
        locks = self.lock_client(token_servers=None, ttl=2.0)
        r = self.redis()
        res = unique("wire")
        lock = locks.acquire(res)
        key = key_prefix() + res
        value = r.get(key)
        self.assertIsNotNone(value, f"no key {key} on Redis")
        self.assertRegex(value.decode(), r"^[0-9a-f]{32}$")
        self.assertTrue(0 < r.pttl(key) <= 2000, r.pttl(key))
        lock.release()
        self.assertIsNone(r.get(key))

    def test_try_acquire_while_held_names_the_holder(self):
        locks = self.lock_client(token_servers=None)
        res = unique("held")
        lock = locks.acquire(res)
        self.addCleanup(lock.release)
        before = self.redis().get(key_prefix() + res)
        with self.assertRaises(fencegate.NotAcquiredError) as cm:
            locks.try_acquire(res)
        self.assertEqual(cm.exception.taken, locks.nodes)
        self.assertEqual(cm.exception.resource, res)
        self.assertIn("held by another client", str(cm.exception))
        self.assertEqual(self.redis().get(key_prefix() + res), before, "a refused attempt touched the holder's key")

    def test_release_never_deletes_another_holders_key(self):
        locks = self.lock_client(token_servers=None)
        r = self.redis()
        res = unique("steal")
        lock = locks.acquire(res)
        key = key_prefix() + res
        # The lock expired and someone else took it.
        r.set(key, "someone-else", px=5000)
        with self.assertRaises(fencegate.LockLostError):
            lock.release()
        self.assertEqual(r.get(key), b"someone-else")
        # Idempotent: the second call says the same and sends nothing new.
        with self.assertRaises(fencegate.LockLostError):
            lock.release()

    def test_refresh_extends_the_key_and_the_validity(self):
        locks = self.lock_client(token_servers=None, ttl=1.0)
        r = self.redis()
        res = unique("refresh")
        lock = locks.acquire(res)
        self.addCleanup(lock.release)
        key = key_prefix() + res
        before = lock.valid_until
        r.pexpire(key, 100)
        lock.refresh()
        self.assertGreater(r.pttl(key), 500)
        self.assertGreater(lock.valid_until, before)
        self.assertFalse(lock.lost.is_set())

    def test_lost_after_the_ttl_passes_without_refresh(self):
        locks = self.lock_client(ttl=0.3)
        lock = locks.acquire(unique("lease"))
        self.assertTrue(lock.held)
        self.assertIsInstance(lock.token, int)
        self.assertTrue(lock.lost.wait(10), "lost not set after the TTL passed")
        self.assertFalse(lock.held)
        self.assertLessEqual(lock.remaining(), 0)
        with self.assertRaises(fencegate.LockLostError):
            lock.refresh()
        with self.assertRaises(fencegate.LockLostError):
            lock.release()

    def test_lost_is_seen_at_the_first_look_after_a_stall(self):
        # is_set() compares the validity with the clock itself: no thread
        # has to run first (a process resumed after a pause sees it at once).
        locks = self.lock_client(token_servers=None, ttl=0.2)
        lock = locks.acquire(unique("stall"))
        locks._keeper.close()  # no keeper thread at all
        while time.monotonic() < lock.valid_until:
            time.sleep(0.01)
        self.assertTrue(lock.lost.is_set())

    def test_refresh_finds_the_key_taken(self):
        locks = self.lock_client(token_servers=None, ttl=5.0)
        res = unique("taken")
        lock = locks.acquire(res)
        self.redis().set(key_prefix() + res, "someone-else", px=5000)
        with self.assertRaises(fencegate.LockLostError) as cm:
            lock.refresh()
        self.assertIn("no longer held by a majority", str(cm.exception))
        self.assertTrue(lock.lost.is_set())

    def test_auto_refresh_keeps_the_lock_past_its_ttl(self):
        locks = self.lock_client(token_servers=None, ttl=0.3, auto_refresh=True)
        res = unique("watchdog")
        lock = locks.acquire(res)
        value = self.redis().get(key_prefix() + res)
        end = time.monotonic() + 1.5  # five TTLs
        while time.monotonic() < end:
            self.assertFalse(lock.lost.wait(0.05), "the watchdog let the lock expire")
        self.assertEqual(self.redis().get(key_prefix() + res), value)
        lock.release()
        self.assertIsNone(self.redis().get(key_prefix() + res))
        self.assertFalse(lock._watchdog.is_alive(), "the watchdog outlived release()")

    def test_auto_refresh_reports_loss_when_the_key_is_taken(self):
        locks = self.lock_client(token_servers=None, ttl=0.6, auto_refresh=True, refresh_every=0.1)
        res = unique("watchdog-lost")
        lock = locks.acquire(res)
        self.redis().set(key_prefix() + res, "someone-else", px=5000)
        self.assertTrue(lock.lost.wait(5))
        # Lost well before the validity would have passed: the watchdog saw it.
        self.assertGreater(lock.remaining(), 0)

    def test_context_manager_releases(self):
        locks = self.lock_client(token_servers=None)
        res = unique("with")
        with locks.acquire(res) as lock:
            self.assertIsNotNone(self.redis().get(key_prefix() + res))
        self.assertIsNone(self.redis().get(key_prefix() + res))
        with self.assertRaises(fencegate.LockReleasedError):
            lock.refresh()
        self.assertFalse(lock.lost.is_set(), "release is not a loss")

    def test_acquire_waits_for_the_holder_and_gives_up_at_its_timeout(self):
        locks = self.lock_client(token_servers=None)
        res = unique("wait")
        holder = locks.acquire(res)
        with self.assertRaises(fencegate.NotAcquiredError):
            locks.acquire(res, timeout=0.2)
        threading.Timer(0.2, holder.release).start()
        lock = locks.acquire(res, timeout=10)
        lock.release()

    def test_efficiency_mode_has_no_token(self):
        locks = self.lock_client(token_servers=None)
        self.assertFalse(locks.fenced)
        with locks.acquire(unique("nofence")) as lock:
            self.assertIsNone(lock.token)
            conn = self.connect()
            with self.assertRaises(fencegate.NoTokenError):
                with lock.transaction(conn):
                    self.fail("the block ran without a token")

    def test_tokens_increase_with_every_grant(self):
        locks = self.lock_client()
        res = unique("tokens")
        seen = []
        for _ in range(3):
            with locks.acquire(res) as lock:
                seen.append(lock.token)
        self.assertEqual(seen, sorted(set(seen)))

    def test_redis_down_fails_at_once_with_refused(self):
        locks = self.lock_client(redis_urls=[f"redis://127.0.0.1:{closed_port()}"])
        with self.assertRaises(fencegate.NotAcquiredError) as cm:
            locks.try_acquire(unique("down"))
        self.assertIn("connection refused", str(cm.exception))


class GrantTokenConfirmTest(StackTest):
    """The order grant -> token -> confirm, attacked at its weak point: the
    holder stalls between the grant and the token."""

    def test_a_lock_lost_before_its_token_is_never_handed_out(self):
        res = unique("confirm")
        key = key_prefix() + res
        r = self.redis()
        other = self.lock_client()
        real = fencegate.TokenClient(token_servers())
        self.addCleanup(real.close)
        got = {}

        class StallingTokens:
            # Stalls like a paused process: the lock expires, another
            # client takes it (and mints its token), then this one mints.
            def next_token(self, resource, timeout=None):
                wait_until(lambda: r.get(key) is None, 10, "the stalled grant to expire")
                got["other"] = other.acquire(res)
                got["ours"] = real.next_token(resource)
                return got["ours"]

        locks = self.lock_client(ttl=0.3, token_servers=None, token_source=StallingTokens())
        with self.assertRaises(fencegate.NotAcquiredError) as cm:
            locks.acquire(res, timeout=0)
        self.assertIn("between the grant and the token", str(cm.exception))
        # Skipping the confirmation would have handed out a token larger than
        # the rightful holder's, and the fence would then refuse the holder.
        self.assertGreater(got["ours"], got["other"].token)
        self.assertTrue(got["other"].held)
        self.assertIsNotNone(r.get(key), "the failed attempt deleted the other holder's lock")
        got["other"].release()

    def test_token_service_down_leaves_no_lock_behind(self):
        res = unique("notoken")
        locks = self.lock_client(token_servers=[f"http://127.0.0.1:{closed_port()}"], token_max_wait=300)
        with self.assertRaises(fencegate.TokenUnavailableError):
            locks.acquire(res)
        self.assertIsNone(self.redis().get(key_prefix() + res))

    def test_a_token_that_is_not_a_positive_int_is_refused(self):
        for bad in (0, -3, True, "7", None):
            with self.subTest(token=bad):
                res = unique("badtoken")

                class Bad:
                    def next_token(self, resource, timeout=None):
                        return bad

                locks = self.lock_client(token_servers=None, token_source=Bad())
                with self.assertRaises(fencegate.TokenServiceError):
                    locks.acquire(res)
                self.assertIsNone(self.redis().get(key_prefix() + res))


class ConcurrencyTest(StackTest):
    def test_threads_share_one_client(self):
        for redis_urls in ([redis_url()], redlock_urls()):
            with self.subTest(nodes=len(redis_urls)):
                locks = self.lock_client(redis_urls=redis_urls, key_prefix=key_prefix())
                res = unique("threads")
                inside, tokens, errors = [0], [], []
                mu = threading.Lock()

                def work():
                    try:
                        for _ in range(8):
                            with locks.acquire(res, timeout=60) as lock:
                                with mu:
                                    inside[0] += 1
                                    overlap = inside[0] != 1
                                    tokens.append(lock.token)
                                time.sleep(0.001)
                                with mu:
                                    inside[0] -= 1
                                if overlap:
                                    errors.append("two threads held the lock at once")
                    except Exception as e:  # noqa: BLE001 - reported below
                        errors.append(repr(e))

                threads = [threading.Thread(target=work) for _ in range(6)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self.assertEqual(errors, [])
                self.assertEqual(len(set(tokens)), 48)


class ForkTest(StackTest):
    def test_a_client_made_before_fork_works_in_the_child(self):
        # As under a pre-forking server: the client (and its threads) is
        # created in the parent, used in the child.
        locks = self.lock_client(redis_urls=redlock_urls(), key_prefix=key_prefix())
        with locks.acquire(unique("fork")):
            pass
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                with locks.acquire(unique("fork"), timeout=10) as lock:
                    code = 0 if lock.token and lock.held else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)


class RedisURLTest(StackTest):
    def test_password_in_the_url(self):
        url = env("FENCEGATE_TEST_REDIS_AUTH_URL")
        locks = self.lock_client(redis_urls=[url], key_prefix="pytest:")
        with locks.acquire(unique("auth")) as lock:
            self.assertIsInstance(lock.token, int)

    def test_wrong_password_says_so_and_shows_no_password(self):
        url = env("FENCEGATE_TEST_REDIS_AUTH_URL")
        wrong = re.sub(r"//:[^@]*@", "//:wrong-secret-value@", url)
        locks = self.lock_client(redis_urls=[wrong], key_prefix="pytest:")
        with self.assertRaises(fencegate.NotAcquiredError) as cm:
            locks.try_acquire(unique("auth"))
        msg = str(cm.exception)
        self.assertIn("authentication failed", msg)
        for text in (msg, repr(locks), str(locks.nodes)):
            self.assertNotIn("wrong-secret-value", text)
            self.assertNotIn(url.split("//:")[1].split("@")[0], text)

    def test_tls(self):
        locks = self.lock_client(redis_urls=[env("FENCEGATE_TEST_REDIS_TLS_URL")], key_prefix="pytest:")
        with locks.acquire(unique("tls")) as lock:
            self.assertIsInstance(lock.token, int)


class BadInputTest(StackTest):
    """Bad input: one clear line, raised before anything is sent."""

    def test_bad_arguments(self):
        good = dict(redis_urls=[redis_url()], token_servers=None)
        cases = [
            (dict(good, redis_urls=[]), ValueError, "no Redis nodes"),
            (dict(good, redis_urls="redis://127.0.0.1:6379"), TypeError, "list of URLs"),
            (dict(good, redis_urls=["http://127.0.0.1:6379"]), ValueError, "scheme"),
            (dict(good, redis_urls=["redis://:secret-pw@127.0.0.1"]), ValueError, "host and a port"),
            (dict(good, redis_urls=["127.0.0.1:6379", "redis://127.0.0.1:6379/0"]), ValueError, "given twice"),
            (dict(good, ttl=0.001), ValueError, "too short"),
            (dict(good, ttl="10"), ValueError, "too short"),
            (dict(good, node_timeout=0), ValueError, "node_timeout"),
            (dict(good, drift_factor=0.7), ValueError, "drift_factor"),
            (dict(good, auto_refresh=True, refresh_every=5, ttl=2), ValueError, "refresh_every"),
            (dict(good, token_servers="http://127.0.0.1:7101"), TypeError, "list of URLs"),
            (dict(good, token_servers=["ftp://x:1"]), ValueError, "not a URL"),
            (dict(good, token_servers=["127.0.0.1"]), ValueError, "no port"),
            (dict(good, tls_ca="/nonexistent/ca.pem"), ValueError, "for token_servers"),
        ]
        for kw, exc, words in cases:
            with self.subTest(kw=kw):
                with self.assertRaises(exc) as cm:
                    fencegate.LockClient(**kw)
                msg = str(cm.exception)
                self.assertIn(words, msg)
                self.assertNotIn("\n", msg)
                self.assertNotIn("secret-pw", msg)

    def test_bad_resources(self):
        locks = self.lock_client(token_servers=None)
        for res in ("", "   ", None, "x" * 1025):
            with self.subTest(res=str(res)[:10]):
                with self.assertRaises(ValueError):
                    locks.acquire(res)
