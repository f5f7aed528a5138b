"""Exceptions of the fencegate client.

Every exception the package raises on purpose derives from :class:`Error`.
Three families matter to a caller:

* :class:`LockError`: the Redis lock (not acquired, lost, released).
* :class:`TokenServiceError`: the token service (refused, unreachable,
  authentication failed, bad answer, bad request, no quorum).
* :class:`FenceError`: PostgreSQL refused the fenced transaction with one of
  fencegate's SQLSTATEs (class ``FG``). Nothing of the transaction committed.

:class:`CommitUnknownError` stands apart: the connection broke while COMMIT
was under way, so the transaction may or may not have committed.
"""

from __future__ import annotations

from typing import Mapping, Sequence


class Error(Exception):
    """Base class of every fencegate exception."""


# --- the lock -----------------------------------------------------------------


class LockError(Error):
    """Base class of errors about the Redis lock."""


class NotAcquiredError(LockError):
    """The lock was not granted: another client holds it on enough nodes, too
    many nodes failed, or the grant took longer than the lock's validity.

    The attributes say which nodes answered what (node names are
    ``host:port``, never a URL with its password).
    """

    def __init__(
        self,
        resource: str,
        *,
        nodes: int,
        quorum: int,
        granted: Sequence[str] = (),
        taken: Sequence[str] = (),
        failed: Sequence[str] = (),
        expired: bool = False,
        node_errors: Mapping[str, str] | None = None,
        reason: str = "",
    ) -> None:
        self.resource = resource
        #: Nodes that granted the lock during the attempt (it was released on
        #: them again).
        self.granted = list(granted)
        #: Nodes on which another client held the lock.
        self.taken = list(taken)
        #: Nodes that failed or did not answer in time (see node_errors).
        self.failed = list(failed)
        #: True when a majority granted the lock, but too late: the time spent
        #: used up the validity.
        self.expired = expired
        self.nodes = nodes
        self.quorum = quorum
        #: node name -> what went wrong there.
        self.node_errors = dict(node_errors or {})
        self.reason = reason
        super().__init__(self._message())

    def _message(self) -> str:
        parts = [
            f"fencegate: lock {self.resource!r} not acquired: "
            f"{len(self.granted)} of {self.nodes} nodes granted, {self.quorum} needed"
        ]
        if self.expired:
            parts.append(", validity used up before the grant completed")
        if self.taken:
            parts.append("; held by another client on " + ", ".join(self.taken))
        if self.failed:
            parts.append(
                "; failed on "
                + ", ".join(f"{n} ({self.node_errors[n]})" if n in self.node_errors else n for n in self.failed)
            )
        if self.reason:
            parts.append(f" ({self.reason})")
        return "".join(parts)


class LockLostError(LockError):
    """The lease ended before the holder released it: its validity passed, or
    a majority of nodes no longer hold this grant's value. Work done under the
    lock may overlap another holder's; only a fenced write is safe from that.
    """


class LockReleasedError(LockError):
    """The lock was already released (refresh after release)."""


class NoTokenError(LockError):
    """A fenced transaction was asked of a lock without a fencing token: the
    client was built without token servers (efficiency mode)."""


# --- the token service --------------------------------------------------------


class TokenServiceError(Error):
    """The token service did not hand out a token.

    ``node_errors`` maps each node URL tried to what it answered. ``kind`` is
    one of ``"refused"`` (nothing listens at the address), ``"unknown_host"``,
    ``"unreachable"`` (no answer in time, connection reset), ``"auth"``
    (authentication failed: TLS or credentials), ``"bad_answer"`` (the
    address does not speak the token API), ``"bad_request"``, ``"not_leader"``,
    ``"no_quorum"``, ``"unavailable"``, ``"internal"``, ``"insecure"`` (the
    credential would have crossed the network in clear text) or
    ``"timeout"`` (the call's time ran out while retrying). It is the kind of the last answer
    that decided the outcome.
    """

    def __init__(self, message: str, *, kind: str, node_errors: Mapping[str, str] | None = None):
        super().__init__(message)
        self.kind = kind
        self.node_errors = dict(node_errors or {})


class TokenRequestError(TokenServiceError, ValueError):
    """The token service refused the request itself (HTTP 400, code
    ``bad_request``: an empty or too long resource name). Retrying cannot help.
    """


class TokenAuthError(TokenServiceError):
    """The token service refused this client: the bearer credentials were
    missing or wrong (HTTP 401/403), or the TLS handshake failed (the server's
    certificate is not trusted by ``tls_ca``, or the server refused the client
    certificate). Retrying cannot help.
    """


class TokenUnavailableError(TokenServiceError):
    """No node minted a token: every node refused the connection or gave an
    answer that is not the token API, or the call's time ran out while the
    nodes answered with retryable errors (no quorum, not leader, unavailable,
    no answer). Nothing was handed out to this caller.
    """


# --- the fence ----------------------------------------------------------------


class FenceError(Error):
    """PostgreSQL refused a fenced transaction with one of fencegate's
    SQLSTATEs. The transaction was rolled back; nothing of it committed.

    ``sqlstate`` is the code, ``retryable`` whether the same work may succeed
    if redone (only FG004), ``hint`` and ``detail`` the server's, and the
    driver's exception is ``__cause__`` (also ``pgerror``).
    """

    #: The SQLSTATE this class stands for (None for the base class).
    code: str | None = None
    #: Whether the same transaction may succeed when run again.
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        resource: str | None = None,
        token: int | None = None,
        hint: str | None = None,
        detail: str | None = None,
        pgerror: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        #: The SQLSTATE PostgreSQL sent; None when raised by the client itself.
        self.sqlstate = sqlstate
        self.resource = resource
        self.token = token
        self.hint = hint
        self.detail = detail
        self.pgerror = pgerror


class StaleTokenError(FenceError):
    """FG001: the token is lower than the last one accepted for the resource:
    a newer lock holder has written it, so this holder has lost its lock. Do
    not retry with the same token; take the lock again (a new token) and redo
    the work from fresh reads."""

    code = "FG001"


class UnfencedWriteError(FenceError):
    """FG002: a write to a protected row in a transaction that holds no
    standing fence on that row's resource. Take the lock of that resource and
    run the write inside ``lock.transaction(conn)``."""

    code = "FG002"


class FenceMisuseError(FenceError):
    """FG003: the fence was used so that it protects nothing: a NULL or
    negative token, an empty resource, not first in its transaction, alone in
    autocommit, a protected row whose resource expression is NULL, a proof
    that is not of the form ``KEYID.HEX``, or a fence without a proof on a
    database that requires signed tokens (the lock's token service does not
    sign: ``lock.proof`` is None). The calling code, the table's data or the
    deployment is wrong; retrying cannot help.

    Raised without a SQLSTATE too, before anything is sent, when
    ``lock.transaction(conn)`` is given a connection that already has a
    transaction open (the fence would not come first)."""

    code = "FG003"


class FenceTimeoutError(FenceError):
    """FG004: the fence waited too long for the resource's mark, which another
    transaction holds (a holder stalled inside its transaction). Nothing was
    checked or advanced. Retryable: run the transaction again, after a short
    random delay."""

    code = "FG004"
    retryable = True


class SchemaInvalidError(FenceError):
    """FG005: the fencegate schema in this database is missing a piece, at
    another version, or altered; the fence refuses to run rather than guard
    nothing. An administrator must repair the schema."""

    code = "FG005"


class ProtectedDDLError(FenceError):
    """FG006: an operation a protected table never allows (TRUNCATE, or DDL
    on it by an application role)."""

    code = "FG006"


class PrivilegedRoleError(FenceError):
    """FG007: the gate refused the session because its role could switch
    enforcement off (a superuser or a table owner). Connect as an application
    role."""

    code = "FG007"


class BadProofError(FenceError):
    """FG008: the database requires signed tokens and the token's proof does
    not verify: forged or altered, minted for another resource or by another
    token service cluster, or signed under a key the database does not hold.
    Nothing was advanced. Retrying with the same token cannot help; a key
    rotation not yet given to the database (``fencegate schema
    require-signed``) or a client pointed at the wrong token service is an
    operator's fix."""

    code = "FG008"


#: SQLSTATE -> exception class, for every code fencegate defines.
FENCE_ERRORS: dict[str, type[FenceError]] = {
    cls.code: cls
    for cls in (
        StaleTokenError,
        UnfencedWriteError,
        FenceMisuseError,
        FenceTimeoutError,
        SchemaInvalidError,
        ProtectedDDLError,
        PrivilegedRoleError,
        BadProofError,
    )
    if cls.code
}


# --- the outcome of COMMIT ----------------------------------------------------


class TransactionAbortedError(Error):
    """The transaction was already aborted by an earlier error when the block
    ended (an exception was caught inside the ``with`` block and the block
    went on). It was rolled back; nothing of it committed."""


class CommitUnknownError(Error):
    """The connection broke while COMMIT was under way: the transaction may
    have committed or not, and no client can tell from the connection. Find
    out from the data (make writes idempotent, e.g. keyed by a request id)
    before redoing them."""

    def __init__(self, message: str, *, resource: str | None = None, token: int | None = None):
        super().__init__(message)
        self.resource = resource
        self.token = token
