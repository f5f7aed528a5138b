"""A held lock: its token, its lease, refresh, release and fenced transactions."""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Iterator

from . import fence, nodes
from .errors import LockError, LockLostError, LockReleasedError

if TYPE_CHECKING:
    from .client import LockClient

log = logging.getLogger("fencegate")

_HELD, _LOST, _RELEASED = "held", "lost", "released"


class LeaseEvent(threading.Event):
    """The ``lost`` event of a Lock. It is set by the client's lease keeper
    the moment the validity passes, and ``is_set()`` also compares the
    validity with the monotonic clock itself, so a process resumed after a
    pause sees the loss at its first look, before any thread has run."""

    def __init__(self, lock: "Lock"):
        super().__init__()
        self._lock_ref = weakref.ref(lock)

    def is_set(self) -> bool:
        if not super().is_set():
            lock = self._lock_ref()
            if lock is not None:
                lock._check_validity()
        return super().is_set()

    isSet = is_set

    def wait(self, timeout: float | None = None) -> bool:
        if self.is_set():
            return True
        return super().wait(timeout) or self.is_set()


class Lock:
    """A held lock. Its methods are safe to call from several threads.

    Attributes:
        resource: the locked resource's name.
        token: the fencing token (an int > 0), larger than the token of every
            earlier holder; None for a client without token servers
            (efficiency mode).
        proof: the token service's signature of the token, bound to its
            cluster and resource (``KEYID.HEX``); None when the service does
            not sign, the token source gives no proofs, or in efficiency
            mode. transaction() passes it to the fence; a database that
            requires signed tokens refuses a token without it (FG003) or
            with one that does not verify (FG008).
        lost: a threading.Event set as soon as the lease is known lost: the
            validity passed (measured on time.monotonic(), so a pause counts),
            a refresh found that a majority of nodes no longer hold this
            grant, or an extension came back after the validity passed. It is
            not set by release().

    Used as a context manager, the lock is released when the block ends;
    release errors are then logged (logger "fencegate"), not raised: call
    release() to see them.

    Knowing the lease is lost does not stop a write already on its way: a
    pause can fall between any check and the write. Only the fence, checked
    by PostgreSQL inside the writing transaction (transaction()), does that.
    """

    def __init__(
        self,
        client: "LockClient",
        resource: str,
        key: str,
        value: str,
        token: int | None,
        valid_until: float,
        *,
        proof: str | None = None,
    ):
        self._client = client
        self.resource = resource
        self.token = token
        self.proof = proof
        self._key = key
        self._value = value
        self._mu = threading.RLock()
        self._valid_until = valid_until
        self._state = _HELD
        self._reason = ""
        self.lost = LeaseEvent(self)
        self._ended = threading.Event()  # lost or released: stops the watchdog
        self._release_mu = threading.Lock()
        self._release_result: tuple[bool, BaseException | None] | None = None
        self._watchdog: threading.Thread | None = None
        client._keeper.schedule(valid_until, self)
        if client._refresh_every is not None:
            self._watchdog = threading.Thread(
                target=self._watch, args=(client._refresh_every,), name=f"fencegate-refresh {resource}", daemon=True
            )
            self._watchdog.start()

    # --- the lease -----------------------------------------------------------

    @property
    def valid_until(self) -> float:
        """The time, on the time.monotonic() clock, until which the lock is
        held for sure (unless a Redis master restarts without persistence):
        the start of the last successful grant or extension + TTL − drift."""
        with self._mu:
            return self._valid_until

    def remaining(self) -> float:
        """Seconds left until valid_until (negative once it has passed)."""
        return self.valid_until - time.monotonic()

    @property
    def held(self) -> bool:
        """True while the lease stands: neither lost nor released."""
        return not self.lost.is_set() and not self._ended.is_set()

    def _check_validity(self) -> bool:
        """Mark the lock lost if its validity has passed; return whether it is
        still held and when it must be checked again (via the keeper)."""
        with self._mu:
            if self._state != _HELD:
                return False
            if time.monotonic() < self._valid_until:
                return True
            self._lose("its validity passed")
            return False

    def _lose(self, reason: str) -> LockLostError:
        """Mark the lock lost; self._mu is held. Returns the error to raise."""
        if self._state == _HELD:
            self._state = _LOST
            self._reason = reason
            threading.Event.set(self.lost)
            self._ended.set()
            log.warning("fencegate: lock %r (token %s) lost: %s", self.resource, self.token, reason)
        return LockLostError(f"fencegate: lock {self.resource!r} lost: {self._reason}")

    # --- refresh and release -------------------------------------------------

    def refresh(self) -> None:
        """Extend the lock to a full TTL from now on every node where it still
        holds this grant (compare-and-pexpire), counting the extension only
        when a majority did so within the new validity.

        Raises LockLostError (and sets ``lost``) when a majority answers that
        the lock is no longer held, or the answer comes after the validity
        passed; LockReleasedError after release(); NotAcquiredError when
        nodes failed without a majority refusing (the lock then stays held
        until its current valid_until).
        """
        with self._mu:
            self._raise_if_ended("refresh")
        valid_until, tally = self._client._extend(self._key, self._value)
        with self._mu:
            self._raise_if_ended("refresh")
            if time.monotonic() >= self._valid_until:
                # Between the old validity and now the lock may have expired
                # and been taken by someone else.
                raise self._lose("the extension came after the validity passed")
            if valid_until is not None:
                if valid_until > self._valid_until:
                    self._valid_until = valid_until
                return
            c = self._client
            refused = sum(1 for s in tally.state if s == nodes.REFUSED)
            if len(c._nodes) - refused < c.quorum:
                raise self._lose(
                    f"no longer held by a majority ({refused} of {len(c._nodes)} nodes hold no or another value)"
                )
            raise c._not_acquired(
                self.resource, tally, reason="refresh failed; the lock stays held until its valid_until"
            )

    def _raise_if_ended(self, what: str) -> None:
        if self._state == _RELEASED:
            raise LockReleasedError(f"fencegate: {what} {self.resource!r}: the lock was released")
        if self._state == _LOST:
            raise LockLostError(f"fencegate: {what} {self.resource!r}: the lock was lost: {self._reason}")

    def release(self) -> None:
        """Delete the lock on every node where it still holds this grant's
        value (compare-and-delete): it never deletes a lock another client
        took after this one expired. Idempotent: later calls return (or
        raise) what the first returned.

        Raises LockLostError when the lock had been lost before (the work
        done under it may have overlapped another holder's), or when fewer
        than a quorum of nodes still held it; LockError when nodes could not
        be reached (the lock then expires after its TTL).
        """
        with self._release_mu:
            if self._release_result is None:
                try:
                    self._release()
                except LockError as e:
                    self._release_result = (False, e)
                else:
                    self._release_result = (True, None)
            ok, err = self._release_result
        if not ok and err is not None:
            raise err

    def _release(self) -> None:
        with self._mu:
            was_lost = self._state == _LOST
            if self._state == _HELD:
                self._state = _RELEASED
            self._ended.set()
        wd = self._watchdog
        if wd is not None and wd is not threading.current_thread():
            wd.join()
        c = self._client
        t = c._fanout(nodes.RELEASE, self._key, self._value, wait_all=True)
        n = len(c._nodes)
        if was_lost:
            raise LockLostError(f"fencegate: release {self.resource!r}: the lock had been lost: {self._reason}")
        if t.ok >= c.quorum:
            return
        if t.errors:
            errs = "; ".join(f"{k}: {v}" for k, v in t.errors.items())
            raise LockError(f"fencegate: release {self.resource!r}: deleted on {t.ok} of {n} nodes: {errs}")
        raise LockLostError(
            f"fencegate: release {self.resource!r}: held by only {t.ok} of {n} nodes (it had expired)"
        )

    def _watch(self, every: float) -> None:
        """The watchdog: refresh every `every` seconds until the lease ends."""
        while not self._ended.wait(every):
            try:
                self.refresh()
            except LockLostError:
                return
            except LockReleasedError:
                return
            except LockError as e:
                log.warning("fencegate: auto-refresh of %r failed; retrying at the next tick: %s", self.resource, e)
            except Exception as e:  # noqa: BLE001 - the watchdog must not die silently
                log.warning("fencegate: auto-refresh of %r failed; retrying at the next tick: %r", self.resource, e)

    # --- fenced transactions -------------------------------------------------

    def transaction(self, conn: Any) -> Iterator[Any]:
        """A context manager for a fenced transaction on a psycopg (3)
        connection: it begins, runs ``SELECT fencegate.fence(resource,
        token, proof)`` (``fencegate.fence(resource, token)`` when the lock
        has no proof) before anything else, yields a cursor, and commits when
        the block ends (it rolls back when the block raises). For writes under
        several locks, use ``fencegate.transaction(conn, lock_a, lock_b)``.

        Fence errors raise the FenceError subclass of their SQLSTATE
        (StaleTokenError for FG001, BadProofError for FG008, ...); a connection lost during COMMIT
        raises CommitUnknownError. It does not look at ``lost``: the fence,
        checked by PostgreSQL inside the transaction, is what keeps a holder
        that lost its lock from writing.
        """
        return fence.transaction(conn, self)

    # --- context manager -----------------------------------------------------

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.release()
        except LockError as e:
            log.warning("fencegate: release of %r on leaving the block: %s", self.resource, e)

    def __repr__(self) -> str:
        with self._mu:
            state = self._state
        return f"<fencegate.Lock resource={self.resource!r} token={self.token} {state}>"


class Keeper:
    """One daemon thread per client that marks locks lost the moment their
    validity passes (a heap of deadlines on the monotonic clock)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, weakref.ref]] = []
        self._seq = itertools.count()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def schedule(self, when: float, lock: Lock) -> None:
        if self._pid != os.getpid():
            # A forked child: the keeper thread stayed in the parent.
            self._cv, self._heap, self._thread, self._pid = threading.Condition(), [], None, os.getpid()
        with self._cv:
            if self._closed:
                return
            entry = (when, next(self._seq), weakref.ref(lock))
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fencegate-lease-keeper", daemon=True)
                self._thread.start()
            if self._heap[0] is entry:
                self._cv.notify()  # the keeper sleeps until a later deadline: wake it

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._closed:
                        return
                    if not self._heap:
                        self._cv.wait()
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        _, _, ref = heapq.heappop(self._heap)
                        break
                    self._cv.wait(wait)
            lock = ref()
            if lock is not None and lock._check_validity():
                # Extended meanwhile: look again at the new validity.
                self.schedule(lock.valid_until, lock)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._heap.clear()
            self._cv.notify()
            t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
