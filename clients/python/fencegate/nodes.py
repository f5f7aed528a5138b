"""Redis masters and the fan-out of one request to all of them.

The wire protocol is lockclient's (docs/protocol.md): a grant is
``SET key value PX ttl NX``; an extension and a release are the
compare-and-pexpire and compare-and-delete scripts below, sent with EVALSHA
and, when a master answers NOSCRIPT (restarted since), with EVAL.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

#: Compare-and-delete: delete the key only while it holds this grant's value.
RELEASE_SCRIPT = (
    'if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end'
)
#: Compare-and-pexpire: reset the TTL (ARGV[2] ms) only while the key holds
#: this grant's value.
EXTEND_SCRIPT = (
    'if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end'
)
RELEASE_SHA = hashlib.sha1(RELEASE_SCRIPT.encode()).hexdigest()
EXTEND_SHA = hashlib.sha1(EXTEND_SCRIPT.encode()).hexdigest()

ACQUIRE, EXTEND, RELEASE = "acquire", "extend", "release"

# Per-node state of one fan-out.
PENDING, OK, REFUSED, FAILED, SKIPPED = range(5)


class _Late(Exception):
    """An acquisition whose caller stopped waiting before it was sent."""


def node_name(spec: str) -> str:
    """Check a Redis URL or HOST:PORT and return the node's name for messages:
    host:port (or the socket path), never the password."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"fencegate: Redis address {spec!r} is empty; give redis://HOST:PORT or HOST:PORT")
    spec = spec.strip()
    if "://" not in spec:
        spec = "redis://" + spec
    u = urllib.parse.urlsplit(spec)
    if u.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(
            f"fencegate: Redis address scheme {u.scheme!r} is not supported; use redis://, rediss:// or unix://"
        )
    if u.scheme == "unix":
        if not u.path:
            raise ValueError("fencegate: unix:// Redis address has no socket path")
        return u.path
    try:
        port = u.port
    except ValueError:
        port = None
    if not u.hostname or port is None:
        raise ValueError(
            f"fencegate: Redis address {_redact(spec)!r} needs a host and a port, e.g. redis://127.0.0.1:6379"
        )
    host = u.hostname if ":" not in u.hostname else f"[{u.hostname}]"
    return f"{host}:{port}"


def _redact(url: str) -> str:
    """url without its password."""
    u = urllib.parse.urlsplit(url)
    if u.password is None:
        return url
    netloc = u.netloc.rsplit("@", 1)[1]
    user = u.username or ""
    return urllib.parse.urlunsplit((u.scheme, f"{user}:***@{netloc}", u.path, u.query, u.fragment))


class Op:
    """One request to one node; its answer goes to future."""

    __slots__ = ("kind", "key", "value", "ttl_ms", "deadline", "future")

    def __init__(self, kind: str, key: str, value: str, ttl_ms: int, deadline: float):
        self.kind, self.key, self.value, self.ttl_ms, self.deadline = kind, key, value, ttl_ms, deadline
        self.future: cf.Future = cf.Future()


class Node:
    """One Redis master.

    With several masters, requests to one master go through a queue that a
    thread of the node's own sends in order: while one batch is on the wire
    the next accumulates and goes out as one pipeline. So the compare-and-
    delete that undoes a failed grant reaches a master after the SET it
    undoes, even when the attempt stopped waiting for that SET.
    """

    def __init__(self, spec: str, timeout: float):
        self.name = node_name(spec)
        url = spec.strip()
        if "://" not in url:
            url = "redis://" + url
        # No retries and no reconnect loop inside redis-py: a lock attempt is
        # retried as a whole, and a master that is down must fail at once.
        self.client = redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry_on_timeout=False,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self._cv = threading.Condition()
        self._queue: list[Op] = []
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._closed = False

    def run(self, kind: str, key: str, value: str, ttl_ms: int, deadline: float) -> bool:
        """Send one request on the caller's thread; True when granted,
        extended or deleted."""
        if kind == ACQUIRE:
            # An acquisition whose caller has stopped waiting would only leave
            # a key behind; releases and extensions are sent regardless.
            if time.monotonic() >= deadline:
                raise _Late()
            return bool(self.client.set(key, value, px=ttl_ms, nx=True))
        if kind == EXTEND:
            return self._script(self.client, EXTEND_SHA, EXTEND_SCRIPT, key, value, ttl_ms) == 1
        return self._script(self.client, RELEASE_SHA, RELEASE_SCRIPT, key, value) == 1

    @staticmethod
    def _script(c, sha: str, source: str, key: str, *args) -> int:
        try:
            return int(c.evalsha(sha, 1, key, *args))
        except redis.exceptions.NoScriptError:
            # A master restarted since the script was first sent has forgotten
            # it: EVAL sends the source, which loads it again.
            return int(c.eval(source, 1, key, *args))

    def submit(self, op: Op) -> cf.Future:
        """Queue op for the node's sender thread; its answer goes to op.future."""
        if self._pid != os.getpid():
            # A forked child: the sender thread stayed in the parent.
            self._cv, self._queue, self._thread, self._pid = threading.Condition(), [], None, os.getpid()
        with self._cv:
            if self._closed:
                op.future.set_exception(ConnectionError("the client is closed"))
                return op.future
            self._queue.append(op)
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_loop, name=f"fencegate-redis {self.name}", daemon=True)
                self._thread.start()
            self._cv.notify()
        return op.future

    def _send_loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            self._send(batch)

    def _send(self, batch: list[Op]) -> None:
        now = time.monotonic()
        live = []
        for op in batch:
            if op.kind == ACQUIRE and now >= op.deadline:
                op.future.set_exception(_Late())
            else:
                live.append(op)
        if not live:
            return
        if len(live) == 1:
            op = live[0]
            try:
                op.future.set_result(self.run(op.kind, op.key, op.value, op.ttl_ms, op.deadline))
            except Exception as e:  # noqa: BLE001 - handed to the waiting caller
                op.future.set_exception(e)
            return
        pipe = self.client.pipeline(transaction=False)
        for op in live:
            if op.kind == ACQUIRE:
                pipe.set(op.key, op.value, px=op.ttl_ms, nx=True)
            elif op.kind == EXTEND:
                pipe.evalsha(EXTEND_SHA, 1, op.key, op.value, op.ttl_ms)
            else:
                pipe.evalsha(RELEASE_SHA, 1, op.key, op.value)
        try:
            replies = pipe.execute(raise_on_error=False)
        except Exception as e:  # noqa: BLE001 - the connection failed: every op in it did
            for op in live:
                op.future.set_exception(e)
            return
        for op, r in zip(live, replies):
            try:
                if isinstance(r, redis.exceptions.NoScriptError):
                    source = EXTEND_SCRIPT if op.kind == EXTEND else RELEASE_SCRIPT
                    args = (op.value, op.ttl_ms) if op.kind == EXTEND else (op.value,)
                    r = int(self.client.eval(source, 1, op.key, *args))
                if isinstance(r, Exception):
                    raise r
                op.future.set_result(bool(r) if op.kind == ACQUIRE else int(r) == 1)
            except Exception as e:  # noqa: BLE001 - handed to the waiting caller
                op.future.set_exception(e)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
            t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
        self.client.close()
        self.client.connection_pool.disconnect()


def describe(err: BaseException) -> str:
    """A one-line description of a node error, without secrets."""
    if isinstance(err, _Late):
        return "not sent: the attempt's time had run out"
    if isinstance(err, redis.exceptions.AuthenticationError):
        return f"authentication failed ({err})"
    if isinstance(err, redis.exceptions.TimeoutError):
        return "no answer in time"
    if isinstance(err, redis.exceptions.ConnectionError):
        text = str(err)
        if "refused" in text.lower():
            return "connection refused"
        return f"unreachable ({text})"
    if isinstance(err, redis.exceptions.ResponseError):
        text = str(err)
        if (
            text.startswith(("WRONGPASS", "NOAUTH", "NOPERM", "AUTH "))
            or "invalid password" in text
            or "invalid username-password" in text
        ):
            return f"authentication failed ({text})"
        return f"error reply ({text})"
    return f"{type(err).__name__}: {err}"


@dataclass
class Tally:
    """The replies of one request sent to every node."""

    state: list[int]
    ok: int = 0
    no: int = 0  # refused + failed
    errors: dict[str, str] = field(default_factory=dict)

    def names(self, nodes: list[Node], st: int) -> list[str]:
        return [n.name for n, s in zip(nodes, self.state) if s == st]


class Fanout:
    """Sends one request to every node at once and counts the replies as they
    arrive. With several nodes each request goes to the node's sender
    thread; a single node is asked on the caller's thread."""

    def __init__(self, nodes: list[Node], timeout: float):
        self.nodes = nodes
        self.quorum = len(nodes) // 2 + 1
        self.timeout = timeout

    def __call__(
        self, kind: str, key: str, value: str, ttl_ms: int, *, skip: list[bool] | None = None, wait_all: bool = False
    ) -> Tally:
        """With wait_all False it returns as soon as a quorum said yes or a
        quorum can no longer be reached; with wait_all True it waits for
        every node. A node that has not answered within the node timeout
        counts as failed."""
        n = len(self.nodes)
        t = Tally(state=[PENDING] * n)
        deadline = time.monotonic() + self.timeout
        todo = [i for i in range(n) if not (skip and skip[i])]
        for i in range(n):
            if skip and skip[i]:
                t.state[i] = SKIPPED
        if not todo:
            return t
        if len(self.nodes) == 1:
            i = todo[0]
            try:
                ok = self.nodes[i].run(kind, key, value, ttl_ms, deadline)
            except Exception as e:  # noqa: BLE001 - every node error counts the same
                self._fail(t, i, e)
            else:
                self._answer(t, i, ok)
            return t
        futures = {self.nodes[i].submit(Op(kind, key, value, ttl_ms, deadline)): i for i in todo}
        pending = set(futures)
        while pending:
            if not wait_all and (t.ok >= self.quorum or t.no > n - self.quorum):
                break
            left = deadline - time.monotonic()
            done, pending = cf.wait(pending, timeout=max(left, 0), return_when=cf.FIRST_COMPLETED)
            for f in done:
                i = futures[f]
                e = f.exception()
                if e is not None:
                    self._fail(t, i, e)
                else:
                    self._answer(t, i, f.result())
            if not done and time.monotonic() >= deadline:
                for f in pending:
                    i = futures[f]
                    t.state[i] = FAILED
                    t.no += 1
                    t.errors[self.nodes[i].name] = f"no answer within {self.timeout:g}s"
                break
        return t

    def _answer(self, t: Tally, i: int, ok: bool) -> None:
        if ok:
            t.state[i] = OK
            t.ok += 1
        else:
            t.state[i] = REFUSED
            t.no += 1

    def _fail(self, t: Tally, i: int, e: BaseException) -> None:
        t.state[i] = FAILED
        t.no += 1
        t.errors[self.nodes[i].name] = describe(e)
