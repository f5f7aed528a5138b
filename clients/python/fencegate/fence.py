"""Fenced PostgreSQL transactions on a psycopg (3) connection, and the mapping
of fencegate's SQLSTATEs to exceptions. A psycopg2 connection works for
tokens without proof: psycopg2 writes parameters into the statement text,
and a proof must not be there."""

from __future__ import annotations

import contextlib
import select
from typing import Any, Iterator

from .errors import (
    FENCE_ERRORS,
    CommitUnknownError,
    FenceError,
    FenceMisuseError,
    NoTokenError,
    TransactionAbortedError,
)

#: The statement a fenced transaction runs first, with the resource and the
#: token as parameters (psycopg binds them: they are not in the statement
#: text that pg_stat_activity shows). It check-and-advances the
#: resource's high-water mark, holds the mark's row lock to the end of the
#: transaction, and fails with FG001 when a higher token was accepted before.
FENCE_SQL = "SELECT fencegate.fence(%s::text, %s::bigint)"

#: FENCE_SQL with the token's proof as the third parameter: what a fenced
#: transaction runs for a lock that has a proof (the token service signs).
#: A database that requires signed tokens verifies the proof before anything
#: is locked or advanced (FG008 when it does not verify); one that does not
#: checks only its form.
FENCE_SIGNED_SQL = "SELECT fencegate.fence(%s::text, %s::bigint, %s::text)"

# libpq's PQtransactionStatus values (psycopg2.extensions.TRANSACTION_STATUS_*).
_IDLE, _ACTIVE, _INTRANS, _INERROR, _UNKNOWN = range(5)


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver exception (psycopg2's pgcode), or None when
    the server sent none (a broken connection, a client-side error)."""
    return getattr(exc, "pgcode", None) or getattr(exc, "sqlstate", None)


def map_error(exc: BaseException, resource: str | None = None, token: int | None = None) -> FenceError | None:
    """The FenceError for a driver exception carrying one of fencegate's
    SQLSTATEs (class FG), or None for any other exception. An FG code this
    version does not know maps to FenceError itself."""
    code = sqlstate(exc)
    if not code or not code.startswith("FG"):
        return None
    cls = FENCE_ERRORS.get(code, FenceError)
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    hint = getattr(diag, "message_hint", None) if diag is not None else None
    detail = getattr(diag, "message_detail", None) if diag is not None else None
    msg = (primary or str(exc)).strip().splitlines()[0] if (primary or str(exc)).strip() else code
    return cls(
        f"{msg} (SQLSTATE {code})",
        sqlstate=code,
        resource=resource,
        token=token,
        hint=hint,
        detail=detail,
        pgerror=exc,
    )


@contextlib.contextmanager
def fence_errors(resource: str | None = None, token: int | None = None) -> Iterator[None]:
    """Raise the FenceError subclass of fencegate's SQLSTATEs for driver
    exceptions raised inside the block (the driver's exception is the
    __cause__); other exceptions pass unchanged. For code that runs its own
    transactions rather than Lock.transaction."""
    try:
        yield
    except Exception as e:
        mapped = map_error(e, resource, token)
        if mapped is None:
            raise
        raise mapped from e


def _status(conn: Any) -> int:
    info = getattr(conn, "info", None)
    if info is not None and hasattr(info, "transaction_status"):
        return int(info.transaction_status)
    return int(conn.get_transaction_status())


@contextlib.contextmanager
def transaction(conn: Any, *locks: Any) -> Iterator[Any]:
    """A fenced transaction on a psycopg2 connection, under one lock or more:
    begin, run FENCE_SIGNED_SQL with each lock's resource, token and proof
    (FENCE_SQL with resource and token for a lock whose ``proof`` is None)
    before anything else (in byte-wise order of the resources, so that two
    transactions fencing the same resources never deadlock), yield a cursor,
    commit when the block ends, roll back when it raises.

    ``lock.transaction(conn)`` is ``transaction(conn, lock)``; a transfer
    between two accounts takes both locks and writes in
    ``transaction(conn, lock_a, lock_b)``.

    The connection must be idle (no transaction open): the fences have to
    come first. A connection in autocommit mode is switched out of it for the
    transaction and back afterwards. Do not commit or roll back on conn
    inside the block. Fence errors raise the FenceError subclass of their
    SQLSTATE, an error caught inside the block raises TransactionAbortedError
    at its end, and a connection lost during COMMIT raises CommitUnknownError.
    """
    if not locks:
        raise TypeError("fencegate: transaction(conn, lock, ...) needs at least one lock")
    for lock in locks:
        if lock.token is None:
            raise NoTokenError(
                f"fencegate: lock {lock.resource!r} has no fencing token (efficiency mode); "
                "build the LockClient with token_servers"
            )
    if any(getattr(lk, "proof", None) for lk in locks) and type(conn).__module__.startswith("psycopg2"):
        # psycopg2 writes parameters into the statement text, where
        # pg_stat_activity shows them to the role's other sessions; a proof is
        # a bearer credential while its token is current.
        raise FenceMisuseError(
            "fencegate: a signed token's proof must not travel in statement text, and psycopg2 puts parameters "
            "there: use a psycopg (3) connection, which binds them (Debian: python3-psycopg)"
        )
    ordered = sorted(locks, key=lambda lk: lk.resource.encode())
    for a, b in zip(ordered, ordered[1:]):
        if a.resource == b.resource:
            raise FenceMisuseError(f"fencegate: two locks on {a.resource!r} in one transaction; pass each lock once")
    # Errors name the lock they concern: the one being fenced, or the only one.
    who: list = [ordered[0].resource, ordered[0].token] if len(ordered) == 1 else [None, None]
    st = _status(conn)
    if st != _IDLE and not getattr(conn, "closed", False):
        raise FenceMisuseError(
            f"fencegate: fenced transaction on {_names(ordered)}: the connection already has a transaction open "
            f"(libpq transaction status {st}); commit or roll back first, so that the fence comes first",
            resource=who[0],
            token=who[1],
        )
    restore_autocommit = bool(conn.autocommit)
    if restore_autocommit:
        conn.autocommit = False
    try:
        cur = conn.cursor()
        try:
            try:
                for lock in ordered:
                    saved, who[:] = list(who), [lock.resource, lock.token]
                    proof = getattr(lock, "proof", None)
                    if proof:
                        cur.execute(FENCE_SIGNED_SQL, (lock.resource, lock.token, proof))
                    else:
                        cur.execute(FENCE_SQL, (lock.resource, lock.token))
                    who[:] = saved
                yield cur
            except BaseException as e:
                _rollback_quietly(conn)
                mapped = map_error(e, who[0], who[1]) if isinstance(e, Exception) else None
                if mapped is not None:
                    raise mapped from e
                raise
            if _status(conn) == _INERROR:
                # An error inside the block was caught there and the block
                # went on: PostgreSQL would answer COMMIT with ROLLBACK.
                _rollback_quietly(conn)
                raise TransactionAbortedError(
                    f"fencegate: fenced transaction on {_names(ordered)} was aborted by an error caught inside the "
                    "block; it was rolled back and nothing of it committed"
                )
            _commit(conn, ordered)
        finally:
            try:
                cur.close()
            except Exception:  # noqa: BLE001 - a closed connection's cursor
                pass
    finally:
        if restore_autocommit and not conn.closed:
            try:
                conn.autocommit = True
            except Exception:  # noqa: BLE001 - left as is when it cannot switch back
                pass


def _names(locks: list) -> str:
    return ", ".join(repr(lk.resource) for lk in locks)


def connection_class(code: str | None) -> bool:
    """Whether a SQLSTATE means the session is over or its link broke, not
    that PostgreSQL refused a statement: class 08 (the fencegate gate sends
    08006 when it loses PostgreSQL) and 57P01-57P03. During COMMIT such an
    error leaves the outcome unknown."""
    return bool(code) and (code.startswith("08") or code in ("57P01", "57P02", "57P03"))


def _session_ended(conn: Any) -> BaseException | None:
    """The error that ended conn's session when PostgreSQL ended it while the
    block ran (its FATAL waits unread on the idle connection), else None. A
    COMMIT sent on such a session would read that FATAL as its answer."""
    try:
        fd = conn.fileno()
    except Exception:  # noqa: BLE001 - cannot tell: COMMIT will
        return None
    pgconn = getattr(conn, "pgconn", None)
    # A FATAL and the end of the stream may come in two reads.
    for _ in range(4):
        try:
            ready, _, _ = select.select([fd], [], [], 0)
        except (OSError, ValueError):
            return None
        if not ready:
            return None
        # libpq hands a FATAL that arrives while no query runs to the
        # notice processor: watch the notices while reading.
        fatal: list[str] = []
        try:
            if pgconn is not None:  # psycopg 3

                def notice(diag: Any) -> None:
                    if getattr(diag, "severity_nonlocalized", None) in ("FATAL", "PANIC") or diag.severity in ("FATAL", "PANIC"):
                        fatal.append(f"{diag.message_primary} (SQLSTATE {diag.sqlstate})")

                conn.add_notice_handler(notice)
                try:
                    pgconn.consume_input()
                    pgconn.is_busy()  # parses what was read: notices reach the handler
                finally:
                    conn.remove_notice_handler(notice)
            else:  # psycopg2: poll reads what waits, as for notifications
                before = list(conn.notices)
                conn.poll()
                fatal += [n.strip() for n in conn.notices if n not in before and n.startswith(("FATAL", "PANIC"))]
        except Exception as e:  # noqa: BLE001 - the session's end, as the driver saw it
            return e
        if fatal:
            return ConnectionError(f"PostgreSQL ended the session: {fatal[0]}")
        if conn.closed:
            return ConnectionError("the connection to PostgreSQL is closed")
    return None


def _commit(conn: Any, locks: list) -> None:
    one = locks[0] if len(locks) == 1 else None
    ended = _session_ended(conn)
    if ended is not None:
        # COMMIT was never sent: the server rolled the transaction back.
        _rollback_quietly(conn)
        raise ended
    closed_before = bool(conn.closed)
    try:
        conn.commit()
    except Exception as e:
        code = sqlstate(e)
        if connection_class(code) or (code is None and not closed_before and conn.closed):
            # The connection broke while COMMIT was on its way or its answer
            # was: the server may have committed or not.
            tokens = ", ".join(f"{lk.resource!r} with token {lk.token}" for lk in locks)
            raise CommitUnknownError(
                f"fencegate: commit of the transaction fenced on {tokens}: the connection broke before the answer "
                f"came ({str(e).strip() or type(e).__name__}); it may or may not have committed: check the data "
                "before redoing it",
                resource=one.resource if one else None,
                token=one.token if one else None,
            ) from e
        mapped = map_error(e, one.resource if one else None, one.token if one else None)
        if mapped is not None:
            raise mapped from e
        raise


def _rollback_quietly(conn: Any) -> None:
    try:
        if not conn.closed:
            conn.rollback()
    except Exception:  # noqa: BLE001 - the original error matters, not this one
        pass
