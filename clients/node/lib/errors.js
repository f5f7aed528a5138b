// Errors of the fencegate client.
//
// Every error the package throws on purpose derives from FencegateError.
// Three families matter to a caller:
//
//   LockError          the Redis lock (not acquired, lost, released)
//   TokenServiceError  the token service (refused, unreachable, auth, ...)
//   FenceError         PostgreSQL refused the fenced transaction with one of
//                      fencegate's SQLSTATEs (class FG); nothing committed
//
// CommitUnknownError stands apart: the connection broke while COMMIT was
// under way, so the transaction may or may not have committed.

export class FencegateError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

// --- the lock ----------------------------------------------------------------

export class LockError extends FencegateError {}

// The lock was not granted: another client holds it on enough nodes, too
// many nodes failed, or the grant took longer than the lock's validity.
// granted, taken and failed list node names (host:port, never a URL with its
// password); nodeErrors maps a failed node to what went wrong there.
export class NotAcquiredError extends LockError {
  constructor(resource, { nodes, quorum, granted = [], taken = [], failed = [], expired = false, nodeErrors = {}, reason = '' }) {
    const parts = [
      `fencegate: lock ${JSON.stringify(resource)} not acquired: ${granted.length} of ${nodes} nodes granted, ${quorum} needed`,
    ];
    if (expired) parts.push(', validity used up before the grant completed');
    if (taken.length) parts.push('; held by another client on ' + taken.join(', '));
    if (failed.length) {
      parts.push('; failed on ' + failed.map((n) => (nodeErrors[n] ? `${n} (${nodeErrors[n]})` : n)).join(', '));
    }
    if (reason) parts.push(` (${reason})`);
    super(parts.join(''));
    this.resource = resource;
    this.nodes = nodes;
    this.quorum = quorum;
    this.granted = [...granted];
    this.taken = [...taken];
    this.failed = [...failed];
    this.expired = expired;
    this.nodeErrors = { ...nodeErrors };
    this.reason = reason;
  }
}

// The lease ended before the holder released it: its validity passed, or a
// majority of nodes no longer hold this grant's value.
export class LockLostError extends LockError {}

// The lock was already released (refresh after release).
export class LockReleasedError extends LockError {}

// transaction() on a lock without a fencing token (a client without token
// servers: an efficiency lock).
export class NoTokenError extends LockError {}

// --- the token service -------------------------------------------------------

// The token service did not hand out a token. kind is one of "refused",
// "unknown_host", "unreachable", "auth", "bad_answer", "bad_request",
// "not_leader", "no_quorum", "unavailable", "internal", "insecure" or
// "timeout"; nodeErrors maps each node URL tried to what it answered.
export class TokenServiceError extends FencegateError {
  constructor(message, { kind, nodeErrors = {} } = {}) {
    super(message);
    this.kind = kind;
    this.nodeErrors = { ...nodeErrors };
  }
}

// The token service refused the request itself (HTTP 400): not retried.
export class TokenRequestError extends TokenServiceError {}

// Credentials refused (401/403), or TLS failed: not retried.
export class TokenAuthError extends TokenServiceError {}

// Every node refused or is not the token API, or the time ran out.
export class TokenUnavailableError extends TokenServiceError {}

// --- the fence ---------------------------------------------------------------

// PostgreSQL refused a fenced transaction with one of fencegate's SQLSTATEs.
// The transaction was rolled back; nothing of it committed. sqlstate is the
// code, retryable whether the same work may succeed if redone (FG004 only),
// hint and detail the server's; cause is the driver's error.
export class FenceError extends FencegateError {
  static code = null;
  static retryable = false;
  constructor(message, { sqlstate = null, resource = null, token = null, hint = null, detail = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.code = sqlstate ?? new.target.code;
    this.sqlstate = sqlstate;
    this.resource = resource;
    this.token = token;
    this.hint = hint;
    this.detail = detail;
    this.retryable = new.target.retryable;
  }
}

// FG001: a newer holder has written with a higher token. Do not retry with
// the same token; take the lock again and redo the work from fresh reads.
export class StaleTokenError extends FenceError {
  static code = 'FG001';
}

// FG002: a write to a protected row without the fence of its resource.
export class UnfencedWriteError extends FenceError {
  static code = 'FG002';
}

// FG003: the fence protects nothing, a malformed proof, or no proof on a
// database that requires signed tokens. Also thrown without a SQLSTATE when
// the connection already had a transaction open.
export class FenceMisuseError extends FenceError {
  static code = 'FG003';
}

// FG004: the fence waited too long behind a stalled holder's transaction.
export class FenceTimeoutError extends FenceError {
  static code = 'FG004';
  static retryable = true;
}

// FG005: the fencegate schema is missing, at another version, or altered.
export class SchemaInvalidError extends FenceError {
  static code = 'FG005';
}

// FG006: TRUNCATE or DDL on a protected table.
export class ProtectedDDLError extends FenceError {
  static code = 'FG006';
}

// FG007: the proxy refused a role that could switch enforcement off.
export class PrivilegedRoleError extends FenceError {
  static code = 'FG007';
}

// FG008: the database requires signed tokens and the proof does not verify.
export class BadProofError extends FenceError {
  static code = 'FG008';
}

// SQLSTATE -> class, for every code fencegate defines.
export const FENCE_ERRORS = Object.freeze(
  Object.fromEntries(
    [
      StaleTokenError,
      UnfencedWriteError,
      FenceMisuseError,
      FenceTimeoutError,
      SchemaInvalidError,
      ProtectedDDLError,
      PrivilegedRoleError,
      BadProofError,
    ].map((c) => [c.code, c]),
  ),
);

// A serialization failure (40001) or a deadlock (40P01) on every attempt
// transaction() was allowed. Nothing committed.
export class SerializationError extends FencegateError {
  constructor(message, { sqlstate = null, resource = null, token = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.code = sqlstate;
    this.sqlstate = sqlstate;
    this.resource = resource;
    this.token = token;
  }
}

// The connection broke while COMMIT was under way: the transaction may have
// committed or not. Check the data (a request id) before redoing it.
export class CommitUnknownError extends FencegateError {
  constructor(message, { resource = null, token = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.resource = resource;
    this.token = token;
  }
}

// An error inside the callback was caught there and the callback went on:
// PostgreSQL answered COMMIT with ROLLBACK. Nothing committed.
export class TransactionAbortedError extends FencegateError {}
