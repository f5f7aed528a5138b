"""LockClient: Redis locks (one node or Redlock) with fencing tokens."""

from __future__ import annotations

import math
import random
import secrets
import time
from typing import Callable, Iterable, Protocol

from . import nodes
from .errors import NotAcquiredError, TokenServiceError
from .lock import Keeper, Lock
from .tokens import MAX_RESOURCE_BYTES, TokenClient, validate_resource

#: The default prefix of the Redis keys: a lock on resource R is the key
#: "fencegate:lock:R", as in the Go lockclient.
DEFAULT_KEY_PREFIX = "fencegate:lock:"

#: A retry strategy: given the attempt number (1 for the first retry), the
#: seconds to wait before it, or None to stop retrying.
RetryStrategy = Callable[[int], "float | None"]


def _jitter(d: float) -> float:
    """A random time in [d/2, d]: competing clients do not retry in lockstep."""
    return d / 2 + random.random() * d / 2


def no_retry() -> RetryStrategy:
    """acquire() gives up after its first attempt, as try_acquire() does."""
    return lambda attempt: None


def fixed_retry(delay: float) -> RetryStrategy:
    """Wait a random time in [delay/2, delay] between attempts."""
    return lambda attempt: _jitter(delay)


def exponential_retry(min_delay: float, max_delay: float) -> RetryStrategy:
    """Wait a random time in [d/2, d] where d doubles from min_delay with
    every attempt, up to max_delay."""

    def delay(attempt: int) -> float:
        return _jitter(min(max_delay, min_delay * 2 ** min(attempt - 1, 32)))

    return delay


class TokenSource(Protocol):
    """Mints fencing tokens: every call returns a number greater than every
    number returned before, for any resource. TokenClient is one."""

    def next_token(self, resource: str, timeout: float | None = None) -> int: ...


class SignedTokenSource(TokenSource, Protocol):
    """A TokenSource that also returns each token's proof, the token
    service's signature binding it to its cluster and resource: (token,
    proof), proof None when the service does not sign. TokenClient is one.
    LockClient asks for the proof whenever its source has next_signed, and
    the lock passes it to the fence."""

    def next_signed(self, resource: str, timeout: float | None = None) -> tuple[int, "str | None"]: ...


class LockClient:
    """Takes locks on one Redis (single-node mode) or on N independent Redis
    masters (Redlock, a lock needs N//2+1 of them), each with a fencing token
    from the fencegate token service. Safe to share between threads.

    Args:
        redis_urls: one Redis for single-node mode, or N independent masters
            (3 or 5) for Redlock: ``redis://[user:password@]host:port[/db]``,
            ``rediss://...`` for TLS (redis-py's URL options such as
            ``?ssl_ca_certs=/path/ca.pem`` apply), ``unix:///path``, or
            ``host:port``. The masters must be independent servers (not
            replicas of one another, not one cluster).
        token_servers: the token service's node URLs
            (``http://host:port``, ``https://host:port`` or ``host:port``).
            Empty or None: the client works in efficiency mode and its locks
            carry no token (never use that for work that must not happen
            twice).
        ttl: seconds a lock lives on Redis unless refreshed. Default 10.
        node_timeout: bound, in seconds, on every request to one Redis node;
            keep it small against the TTL. Default 0.1.
        drift_factor: clock drift allowance: validity = TTL − elapsed −
            (TTL × drift_factor + 2 ms). Default 0.01.
        retry: how acquire() waits between attempts. Default
            exponential_retry(0.005, 0.25).
        acquire_timeout: how long acquire() keeps trying when not given a
            timeout of its own, in seconds. Default 30.
        auto_refresh: run a watchdog thread per lock that extends it every
            refresh_every seconds (TTL/3 when None) until released; when the
            extension is refused by a majority, or none succeeds before the
            validity passes, ``lost`` is set. Default False.
        key_prefix: prefix of the Redis keys. Default "fencegate:lock:".
        tls_ca, tls_cert, tls_key, credentials, token_timeout,
            token_max_wait: passed to TokenClient (TLS to the token service,
            a file holding the bearer credentials, the per-request timeout and
            the bound on one token call).
        token_source: an object with next_token(resource, timeout) to use
            instead of token_servers; when it also has next_signed(resource,
            timeout) (a SignedTokenSource), the locks carry its proofs.
    """

    def __init__(
        self,
        redis_urls: Iterable[str],
        token_servers: Iterable[str] | None = None,
        ttl: float = 10.0,
        *,
        node_timeout: float = 0.1,
        drift_factor: float = 0.01,
        retry: RetryStrategy | None = None,
        acquire_timeout: float = 30.0,
        auto_refresh: bool = False,
        refresh_every: float | None = None,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        credentials: str | None = None,
        token_timeout: float = 3.0,
        token_max_wait: float = 30.0,
        token_source: TokenSource | None = None,
    ) -> None:
        if isinstance(redis_urls, str):
            raise TypeError("fencegate: redis_urls is a list of URLs, e.g. ['redis://127.0.0.1:6379']")
        urls = list(redis_urls or [])
        if not urls:
            raise ValueError(
                "fencegate: no Redis nodes given; pass one URL (single node) or several independent masters (Redlock)"
            )
        ttl_ms = _ms(ttl)
        if ttl_ms is None or ttl_ms < 10:
            raise ValueError(f"fencegate: ttl {ttl!r} is too short; use at least 0.01 seconds")
        if not _positive(node_timeout):
            raise ValueError(f"fencegate: node_timeout {node_timeout!r} must be a positive number of seconds")
        if not (isinstance(drift_factor, (int, float)) and 0 <= drift_factor < 0.5):
            raise ValueError(f"fencegate: drift_factor {drift_factor!r} must be in [0, 0.5)")
        if not (_positive(acquire_timeout) or acquire_timeout == math.inf):
            raise ValueError(f"fencegate: acquire_timeout {acquire_timeout!r} must be a positive number of seconds")
        if auto_refresh:
            every = ttl / 3 if refresh_every is None else refresh_every
            if not _positive(every) or every >= ttl:
                raise ValueError(
                    f"fencegate: refresh_every {refresh_every!r} must be positive and shorter than the ttl {ttl}"
                )
            self._refresh_every: float | None = float(every)
        else:
            self._refresh_every = None
        if not _positive(token_max_wait):
            raise ValueError(f"fencegate: token_max_wait {token_max_wait!r} must be a positive number of seconds")
        if isinstance(token_servers, str):
            raise TypeError("fencegate: token_servers is a list of URLs, e.g. ['http://127.0.0.1:7101']")
        if token_source is not None and token_servers:
            raise ValueError("fencegate: give token_servers or token_source, not both")

        self.ttl = float(ttl)
        self._ttl_ms = ttl_ms
        self.node_timeout = float(node_timeout)
        self.key_prefix = key_prefix
        self.acquire_timeout = float(acquire_timeout)
        self._retry = retry or exponential_retry(0.005, 0.25)
        self._drift = self.ttl * drift_factor + 0.002
        names = [nodes.node_name(u) for u in urls]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(
                f"fencegate: Redis node {dup} is given twice; Redlock needs independent masters, each counted once"
            )
        self._nodes = [nodes.Node(u, self.node_timeout) for u in urls]
        self.quorum = len(self._nodes) // 2 + 1
        self._fan = nodes.Fanout(self._nodes, self.node_timeout)
        self._keeper = Keeper()
        self._owns_tokens = False
        self._tokens: TokenSource | None = token_source
        if token_servers:
            self._tokens = TokenClient(
                list(token_servers),
                tls_ca=tls_ca,
                tls_cert=tls_cert,
                tls_key=tls_key,
                credentials=credentials,
                attempt_timeout=token_timeout,
                max_wait=token_max_wait,
            )
            self._owns_tokens = True
        elif any(x is not None for x in (tls_ca, tls_cert, tls_key, credentials)):
            raise ValueError("fencegate: tls_ca, tls_cert, tls_key and credentials are for token_servers; none given")
        self._token_max_wait = float(token_max_wait)

    @property
    def fenced(self) -> bool:
        """True when locks carry fencing tokens (the client has token servers)."""
        return self._tokens is not None

    @property
    def nodes(self) -> list[str]:
        """The Redis nodes' names (host:port)."""
        return [n.name for n in self._nodes]

    def close(self) -> None:
        """Close the Redis connections and the token client, and stop the
        client's threads. Locks still held expire after their TTL."""
        self._keeper.close()
        for n in self._nodes:
            n.close()
        if self._owns_tokens and self._tokens is not None:
            self._tokens.close()  # type: ignore[attr-defined]

    def __enter__(self) -> "LockClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<fencegate.LockClient nodes={self.nodes} quorum={self.quorum} fenced={self.fenced}>"

    # --- taking locks --------------------------------------------------------

    def acquire(self, resource: str, timeout: float | None = None) -> Lock:
        """Take the lock on resource, retrying after a random delay (see
        ``retry``) while another client holds it, for at most ``timeout``
        seconds (the client's acquire_timeout when None; math.inf waits
        without bound). The token is part of that time: once granted, minting
        it takes at most token_max_wait, never past the timeout nor past
        the grant's validity, so the whole call ends within timeout (plus
        the few Redis round trips that release the lock on failure).

        It returns the lock only after the lock was granted on a majority, a
        fencing token was minted, and the lock was confirmed still held and
        extended (see docs/protocol.md for why). Raises NotAcquiredError when
        the time runs out or the retry strategy gives up, and
        TokenServiceError when no token could be minted (not retried: the
        token client already retried what can succeed).
        """
        _check_resource(resource)
        limit = self.acquire_timeout if timeout is None else timeout
        if not (_positive(limit) or limit == math.inf or limit == 0):
            raise ValueError(f"fencegate: timeout {timeout!r} must be a number of seconds >= 0")
        deadline = time.monotonic() + limit
        attempt = 0
        outage_since = None
        while True:
            attempt += 1
            started = time.monotonic()
            try:
                return self._try_acquire(resource, deadline)
            except NotAcquiredError as e:
                last = e
            # What retrying cannot bring ends the call now, whatever the
            # timeout: nodes that reject the credentials, the ACL or the
            # protocol; nodes that stay unreachable for MAX_UNREACHABLE.
            verdict = _diagnose(last)
            if verdict == "hopeless":
                raise _give_up(last, "the Redis nodes reject this client: fix the password, user or ACL in the Redis URLs, or the scheme (redis:// or rediss://)")
            if verdict == "outage":
                outage_since = started if outage_since is None else outage_since
                now = time.monotonic()
                # Give up once the next attempt would start past the bound.
                if now + (self._retry(attempt) or 0) - outage_since >= MAX_UNREACHABLE:
                    raise _give_up(
                        last,
                        f"too few Redis nodes reachable for {now - outage_since:.1f} s: check that the servers run "
                        "at the addresses of the Redis URLs and that the scheme (redis:// or rediss://) is theirs",
                    )
            else:
                outage_since = None
            left = deadline - time.monotonic()
            if left <= 0:
                raise last
            d = self._retry(attempt)
            if d is None:
                raise last
            if d >= left:
                time.sleep(left)
                raise last
            time.sleep(d)

    def try_acquire(self, resource: str) -> Lock:
        """Make one attempt to take the lock on resource. Raises
        NotAcquiredError when another client holds it (see .taken)."""
        _check_resource(resource)
        return self._try_acquire(resource)

    def _try_acquire(self, resource: str, deadline: float = math.inf) -> Lock:
        key = self.key_prefix + resource
        value = secrets.token_hex(16)
        valid_until, taken = self._grant(resource, key, value)
        if self._tokens is None:
            return Lock(self, resource, key, value, None, valid_until)
        try:
            # A token after the grant's validity or the caller's deadline
            # is of no use: the wait for it ends at the earlier of the two.
            wait = min(self._token_max_wait, valid_until - time.monotonic(), deadline - time.monotonic())
            token, proof = self._next_token(resource, max(wait, 0.001))
        except BaseException:
            self._cleanup(key, value, taken)
            raise
        if not isinstance(token, int) or isinstance(token, bool) or token <= 0:
            self._cleanup(key, value, taken)
            raise TokenServiceError(
                f"fencegate: the token source returned {token!r} for {resource!r}; a token is an int > 0",
                kind="bad_answer",
            )
        if proof is not None and not (isinstance(proof, str) and proof):
            self._cleanup(key, value, taken)
            raise TokenServiceError(
                f"fencegate: the token source returned the proof {proof!r} for {resource!r}; a proof is a "
                "non-empty str or None",
                kind="bad_answer",
            )
        # Confirm: the key still holds our value on a majority, so nobody
        # else was granted the lock between our grant and the token;
        # extending it gives the caller a full validity to use the token in.
        valid_until, tally = self._extend(key, value)
        if valid_until is None:
            self._cleanup(key, value, taken)
            raise self._not_acquired(
                resource, tally, reason="lost between the grant and the token; the token was not used"
            )
        return Lock(self, resource, key, value, token, valid_until, proof=proof)

    def _next_token(self, resource: str, timeout: float) -> tuple[object, object]:
        """A token and its proof (None when the source cannot say) from the
        token source, within timeout seconds."""
        signed = getattr(self._tokens, "next_signed", None)
        if signed is not None:
            out = signed(resource, timeout=timeout)
            if not (isinstance(out, tuple) and len(out) == 2):
                raise TokenServiceError(
                    f"fencegate: the token source's next_signed returned {out!r} for {resource!r}; "
                    "it returns (token, proof)",
                    kind="bad_answer",
                )
            return out[0], out[1]
        return self._tokens.next_token(resource, timeout=timeout), None  # type: ignore[union-attr]

    # --- the Redlock steps ---------------------------------------------------

    def _grant(self, resource: str, key: str, value: str) -> tuple[float, list[bool]]:
        """One round of SET NX PX on every node; success on a majority within
        the validity (TTL − elapsed − drift). On failure it deletes the key
        (compare-and-delete) wherever it may have been set."""
        start = time.monotonic()
        t = self._fanout(nodes.ACQUIRE, key, value)
        valid_until = start + self.ttl - self._drift
        taken = [s == nodes.REFUSED for s in t.state]
        if t.ok >= self.quorum and time.monotonic() < valid_until:
            return valid_until, taken
        self._cleanup(key, value, taken)
        raise self._not_acquired(resource, t, expired=t.ok >= self.quorum)

    def _extend(self, key: str, value: str) -> tuple[float | None, nodes.Tally]:
        """Compare-and-pexpire on every node; the new validity when a
        majority extended within it, else None."""
        start = time.monotonic()
        t = self._fanout(nodes.EXTEND, key, value)
        valid_until = start + self.ttl - self._drift
        if t.ok >= self.quorum and time.monotonic() < valid_until:
            return valid_until, t
        return None, t

    def _cleanup(self, key: str, value: str, skip: list[bool]) -> None:
        """Compare-and-delete on every node not in skip, waiting for the
        answers (at most the node timeout): a half-taken lock must not stay."""
        self._fanout(nodes.RELEASE, key, value, skip=skip, wait_all=True)

    def _fanout(self, kind: str, key: str, value: str, **kw) -> nodes.Tally:
        return self._fan(kind, key, value, self._ttl_ms, **kw)

    def _not_acquired(self, resource: str, t: nodes.Tally, *, expired: bool = False, reason: str = "") -> NotAcquiredError:
        return NotAcquiredError(
            resource,
            nodes=len(self._nodes),
            quorum=self.quorum,
            granted=t.names(self._nodes, nodes.OK),
            taken=t.names(self._nodes, nodes.REFUSED),
            failed=t.names(self._nodes, nodes.FAILED),
            expired=expired,
            node_errors=t.errors,
            reason=reason,
        )


def _ms(seconds: float) -> int | None:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
        return None
    return int(round(seconds * 1000))


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


#: How long acquire() keeps trying while too few Redis nodes can be reached
#: (refused, no answer, a TLS handshake that never completes), in seconds;
#: a held lock is waited for until the timeout.
MAX_UNREACHABLE = 2.0

# Error replies after which the node may answer otherwise soon.
_BUSY_REPLIES = ("LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN")


def _diagnose(e: NotAcquiredError) -> str:
    """What a failed attempt says about the next: "hopeless" when more nodes
    reject this client (credentials, ACL, protocol) than the quorum can
    spare, "outage" when too few nodes answered, else "busy"."""
    permanent = 0
    for n in e.failed:
        what = e.node_errors.get(n, "")
        if what.startswith("authentication failed") or (
            what.startswith("error reply") and not any(b in what for b in _BUSY_REPLIES)
        ):
            permanent += 1
    if permanent > e.nodes - e.quorum:
        return "hopeless"
    if e.nodes - len(e.failed) < e.quorum or e.expired:
        return "outage"
    return "busy"


def _give_up(e: NotAcquiredError, why: str) -> NotAcquiredError:
    return NotAcquiredError(
        e.resource,
        nodes=e.nodes,
        quorum=e.quorum,
        granted=e.granted,
        taken=e.taken,
        failed=e.failed,
        expired=e.expired,
        node_errors=e.node_errors,
        reason=why,
    )


def _check_resource(resource: object) -> None:
    validate_resource(resource)
