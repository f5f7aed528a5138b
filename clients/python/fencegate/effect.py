"""Effects: calls to other systems that a fenced transaction records and a
relay ("fencegate relay") makes once the transaction commits."""

from __future__ import annotations

import json
from typing import Any

from .fence import fence_errors

# The statement that records an effect: the resource, the relay's target
# name and the JSON payload. It returns the effect's id and fails with
# FG002 (UnfencedWriteError) unless the transaction holds a standing fence
# on the resource.
EFFECT_SQL = "SELECT fencegate.effect(%s::text, %s::text, %s::jsonb)"


def record_effect(cur: Any, lock: Any, target: str, payload: Any) -> int:
    """Record, in the fenced transaction of ``cur`` (the cursor
    ``lock.transaction(conn)`` yields), that ``payload`` is to be POSTed to
    the relay's target named ``target`` once the transaction commits, with
    the lock's resource and token in the Fencing-Resource and Fencing-Token
    headers and an Idempotency-Key that stays the same across retries.
    Returns the effect's id. ``payload`` is encoded with json.dumps; bytes
    are taken as JSON as they are. A rollback leaves no effect; a stale
    holder never gets here (its fence raised StaleTokenError)."""
    if isinstance(payload, (bytes, bytearray)):
        body = bytes(payload).decode("utf-8")
        json.loads(body)  # must be JSON
    else:
        body = json.dumps(payload)
    with fence_errors(lock.resource, lock.token):
        cur.execute(EFFECT_SQL, (lock.resource, target, body))
        return int(cur.fetchone()[0])
