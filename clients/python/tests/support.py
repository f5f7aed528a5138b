"""What the tests share: the endpoints of the stack the Go test started
(environment variables), and helpers that create and clean up what a test
uses.

Run the suite through ``go test ./clients/python/``: it starts the stack and
sets the variables. Run alone, every test fails with a line naming the
variable that is missing (never skips).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import unittest
import urllib.error
import urllib.request
import uuid

import psycopg
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import fencegate  # noqa: E402


def env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        raise RuntimeError(
            f"{name} is not set: run the Python tests with `go test ./clients/python/`, which starts the stack"
        )
    return v


def redis_url() -> str:
    return env("FENCEGATE_TEST_REDIS_URL")


def redlock_urls() -> list[str]:
    return env("FENCEGATE_TEST_REDLOCK_URLS").split(",")


def token_servers() -> list[str]:
    return env("FENCEGATE_TEST_TOKEN_SERVERS").split(",")


def key_prefix() -> str:
    """The lock key prefix of this run, under the Go test's key prefix on the
    shared Redis (the Go test deletes every key under it at the end)."""
    return env("FENCEGATE_TEST_KEY_PREFIX") + "lock:"


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:12]}"


_closed_next = 0


def closed_port() -> int:
    """A loopback port that refuses connections and stays so: a port below
    1024 where nothing listens now. A port that was merely free a moment ago
    can be handed to any listener that binds port 0 next, anywhere on the
    machine, and a test expecting a refusal then waits for an answer that
    never comes; nothing in the tests binds a port below 1024 (the kernel
    never hands them out for port 0). Successive calls return distinct
    ports; the Node.js and Go tests pick theirs the same way."""
    global _closed_next
    for _ in range(1023):
        port = _closed_next % 1023 + 1
        _closed_next += 1
        with socket.socket() as s:
            s.settimeout(1.0)
            try:
                s.connect(("127.0.0.1", port))
            except ConnectionRefusedError:
                return port
            except OSError:
                continue
    raise RuntimeError("no port below 1024 refuses connections on 127.0.0.1")


def wait_until(cond, timeout: float = 20.0, what: str = "condition") -> None:
    """Poll cond every 10 ms until it is true; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


class StackTest(unittest.TestCase):
    """A test case with helpers for the stack; everything it creates is
    closed when the test ends."""

    def lock_client(self, **kw) -> fencegate.LockClient:
        opts = dict(
            redis_urls=[redis_url()],
            token_servers=token_servers(),
            ttl=2.0,
            key_prefix=key_prefix(),
            node_timeout=1.0,
            retry=fencegate.fixed_retry(0.005),
        )
        opts.update(kw)
        c = fencegate.LockClient(**opts)
        self.addCleanup(c.close)
        return c

    def redis(self, url: str | None = None) -> redis.Redis:
        r = redis.Redis.from_url(url or redis_url(), socket_timeout=5)
        self.addCleanup(r.close)
        return r

    def connect(self, admin: bool = False, dsn: str | None = None):
        conn = psycopg.connect(dsn or env("FENCEGATE_TEST_ADMIN_DSN" if admin else "FENCEGATE_TEST_DSN"))
        self.addCleanup(conn.close)
        return conn

    def query(self, sql: str, args=()):
        """Run one read on a fresh owner connection and return all rows."""
        conn = psycopg.connect(env("FENCEGATE_TEST_ADMIN_DSN"))
        try:
            with conn, conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall()
        finally:
            conn.close()

    def balance(self, account: str) -> int:
        rows = self.query("SELECT balance FROM accounts WHERE id = %s", (account,))
        self.assertEqual(len(rows), 1, f"account {account} not found")
        return rows[0][0]

    def new_account(self, locks: fencegate.LockClient, balance: int = 100) -> str:
        """Insert an account in a transaction fenced with its own lock."""
        acct = unique("acct")
        conn = self.connect()
        with locks.acquire("account:" + acct) as lock:
            with lock.transaction(conn) as cur:
                cur.execute("INSERT INTO accounts (id, balance) VALUES (%s, %s)", (acct, balance))
        return acct

    def new_counter(self, locks: fencegate.LockClient) -> str:
        cid = unique("ctr")
        conn = self.connect()
        with locks.acquire("counter:" + cid) as lock:
            with lock.transaction(conn) as cur:
                cur.execute("INSERT INTO counters (id, n) VALUES (%s, 0)", (cid,))
        return cid


def peer(path: str, **body) -> tuple[int, dict | list]:
    """POST to the Go peer (a Go lockclient driven by the tests)."""
    req = urllib.request.Request(
        env("FENCEGATE_TEST_GO_PEER") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
