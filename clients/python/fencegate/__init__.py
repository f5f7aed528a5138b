"""fencegate: Redis locks with fencing tokens, and PostgreSQL transactions
that refuse a holder who lost its lock.

This is the Python client of the fencegate lock protocol (docs/protocol.md
in the repository). It speaks exactly the Go lockclient's wire protocol (the
same Redis keys, values and scripts), so Go and Python processes contend for
the same locks correctly::

    import psycopg
    import fencegate

    locks = fencegate.LockClient(
        redis_urls=["redis://127.0.0.1:6379"],
        token_servers=["http://127.0.0.1:7101", "http://127.0.0.1:7102", "http://127.0.0.1:7103"],
        ttl=10,
    )
    conn = psycopg.connect("postgresql://app@127.0.0.1:6432/shop")
    with locks.acquire("account:42") as lock:        # granted -> token -> confirmed
        try:
            with lock.transaction(conn) as cur:      # BEGIN; fence; ...; COMMIT
                cur.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 42")
        except fencegate.StaleTokenError:
            pass  # a newer holder wrote; nothing of this transaction committed

With a token service that signs its tokens (``--signing-keys``), each lock
keeps the token's proof (``lock.proof``) and ``lock.transaction`` passes it
to ``fencegate.fence(resource, token, proof)``; a database that requires
signed tokens refuses a proof that does not verify with BadProofError.

Dependencies: the standard library, redis-py and psycopg 3 (Debian's
python3-redis and python3-psycopg). Python 3.11 or later.
"""

import logging as _logging

from .client import (
    DEFAULT_KEY_PREFIX,
    LockClient,
    RetryStrategy,
    SignedTokenSource,
    TokenSource,
    exponential_retry,
    fixed_retry,
    no_retry,
)
from .errors import (
    FENCE_ERRORS,
    BadProofError,
    CommitUnknownError,
    Error,
    FenceError,
    FenceMisuseError,
    FenceTimeoutError,
    LockError,
    LockLostError,
    LockReleasedError,
    NoTokenError,
    NotAcquiredError,
    PrivilegedRoleError,
    ProtectedDDLError,
    SchemaInvalidError,
    StaleTokenError,
    TokenAuthError,
    TokenRequestError,
    TokenServiceError,
    TokenUnavailableError,
    TransactionAbortedError,
    UnfencedWriteError,
)
from .effect import EFFECT_SQL, record_effect
from .fence import FENCE_SIGNED_SQL, FENCE_SQL, fence_errors, map_error, sqlstate, transaction
from .lock import Lock
from .nodes import EXTEND_SCRIPT, RELEASE_SCRIPT
from .tokens import Token, TokenClient

__version__ = "0.1.0"

# A library logs through its own logger and lets the application decide
# where the lines go.
_logging.getLogger("fencegate").addHandler(_logging.NullHandler())

__all__ = [
    "BadProofError",
    "CommitUnknownError",
    "DEFAULT_KEY_PREFIX",
    "EXTEND_SCRIPT",
    "Error",
    "FENCE_ERRORS",
    "FENCE_SIGNED_SQL",
    "FENCE_SQL",
    "FenceError",
    "FenceMisuseError",
    "FenceTimeoutError",
    "Lock",
    "SignedTokenSource",
    "LockClient",
    "LockError",
    "LockLostError",
    "LockReleasedError",
    "NoTokenError",
    "NotAcquiredError",
    "PrivilegedRoleError",
    "ProtectedDDLError",
    "RELEASE_SCRIPT",
    "RetryStrategy",
    "SchemaInvalidError",
    "StaleTokenError",
    "Token",
    "TokenAuthError",
    "TokenClient",
    "TokenRequestError",
    "TokenServiceError",
    "TokenSource",
    "TokenUnavailableError",
    "TransactionAbortedError",
    "UnfencedWriteError",
    "exponential_retry",
    "fence_errors",
    "fixed_retry",
    "map_error",
    "no_retry",
    "sqlstate",
    "transaction",
]
