// Fenced PostgreSQL transactions on a node-postgres (pg) Client or Pool, and
// the mapping of fencegate's SQLSTATEs to errors.

import { setTimeout as sleep } from 'node:timers/promises';
import {
  CommitUnknownError,
  FENCE_ERRORS,
  FenceError,
  FencegateError,
  FenceMisuseError,
  FenceTimeoutError,
  NoTokenError,
  SerializationError,
  TransactionAbortedError,
} from './errors.js';

// The statement a fenced transaction runs first, with the resource and the
// token as parameters. It check-and-advances the resource's high-water
// mark, holds the mark's row lock to the end of the transaction, and fails
// with FG001 when a higher token was accepted before.
export const FENCE_SQL = 'SELECT fencegate.fence($1::text, $2::bigint)';

// FENCE_SQL with the token's proof as the third parameter: what a fenced
// transaction runs for a lock that has a proof (the token service signs).
export const FENCE_SIGNED_SQL = 'SELECT fencegate.fence($1::text, $2::bigint, $3::text)';

// SQLSTATEs after which the whole transaction is run again.
const RETRYABLE = new Set(['40001', '40P01', 'FG004']);

// sqlstate is the SQLSTATE of a driver error (pg's code), or null when the
// server sent none (a broken connection, a client-side error).
export function sqlstate(err) {
  if (!err || typeof err !== 'object') return null;
  if (typeof err.sqlstate === 'string') return err.sqlstate;
  return typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) && err.severity !== undefined ? err.code : null;
}

// mapError returns the FenceError for a driver error carrying one of
// fencegate's SQLSTATEs (class FG), or null for any other error. An FG code
// this version does not know maps to FenceError itself.
export function mapError(err, resource = null, token = null) {
  if (err instanceof FenceError) return err;
  const code = sqlstate(err);
  if (!code || !code.startsWith('FG')) return null;
  const Cls = FENCE_ERRORS[code] || FenceError;
  const first = String(err.message || code).trim().split('\n')[0] || code;
  return new Cls(`${first} (SQLSTATE ${code})`, {
    sqlstate: code,
    resource,
    token,
    hint: err.hint ?? null,
    detail: err.detail ?? null,
    cause: err,
  });
}

function isPool(db) {
  return typeof db.connect === 'function' && typeof db.totalCount === 'number' && typeof db.idleCount === 'number';
}

const byteOrder = (a, b) => Buffer.compare(Buffer.from(a.resource, 'utf8'), Buffer.from(b.resource, 'utf8'));

// transaction runs fn in a fenced transaction under one lock or more: it
// begins, runs FENCE_SIGNED_SQL with each lock's resource, token and proof
// (FENCE_SQL for a lock without proof) before anything else, in byte-wise
// order of the resources, calls fn(client), and commits. When fn or any
// step fails the transaction is rolled back.
//
// A serialization failure (40001), a deadlock (40P01) or a fence timeout
// (FG004) rolls the attempt back and runs the whole transaction again, fence
// and fn included, up to the client's txRetries times and only while the
// leases have time left: fn may run more than once, and must do nothing
// outside the transaction that may not be repeated. When COMMIT's outcome
// is unknown (the connection broke after it was sent) it throws
// CommitUnknownError and never retries.
export async function transaction(db, locks, fn) {
  if (!db || typeof db.query !== 'function') throw new TypeError('fencegate: transaction(db, fn) needs a pg Client or Pool');
  if (typeof fn !== 'function') throw new TypeError('fencegate: transaction(db, fn) needs a callback');
  if (!locks.length) throw new TypeError('fencegate: transaction needs at least one lock');
  for (const lock of locks) {
    if (lock.token === null || lock.token === undefined) {
      throw new NoTokenError(`fencegate: lock ${JSON.stringify(lock.resource)} has no fencing token (efficiency mode); build the LockClient with tokenServers`);
    }
  }
  const ordered = [...locks].sort(byteOrder);
  for (let i = 1; i < ordered.length; i++) {
    if (ordered[i].resource === ordered[i - 1].resource) {
      throw new FenceMisuseError(`fencegate: two locks on ${JSON.stringify(ordered[i].resource)} in one transaction; pass each lock once`);
    }
  }
  const retries = Math.min(...ordered.map((l) => l._client.txRetries));
  for (let attempt = 1; ; attempt++) {
    try {
      return await attemptOnce(db, ordered, fn);
    } catch (e) {
      const code = sqlstate(e);
      if (!code || !RETRYABLE.has(code) || e instanceof CommitUnknownError) throw e;
      const wait = jitter(Math.min(1 << Math.min(attempt - 1, 6), 50));
      const left = Math.min(...ordered.map((l) => (l.lost ? 0 : l.remaining())));
      if (attempt > retries) throw giveUp(ordered, attempt, '', e);
      if (left <= wait) throw giveUp(ordered, attempt, ', no lease left for another', e);
      await sleep(wait);
    }
  }
}

function jitter(d) {
  return d / 2 + (Math.random() * d) / 2;
}

function giveUp(locks, attempt, why, err) {
  const names = locks.map((l) => JSON.stringify(l.resource)).join(', ');
  const n = attempt === 1 ? '1 attempt' : `${attempt} attempts`;
  const one = locks.length === 1 ? locks[0] : null;
  if (err instanceof FenceTimeoutError) {
    return new FenceTimeoutError(`fencegate: fenced transaction on ${names} after ${n}${why}: ${err.message}`, {
      sqlstate: 'FG004',
      resource: err.resource,
      token: err.token,
      hint: err.hint,
      detail: err.detail,
      cause: err.cause ?? err,
    });
  }
  const code = sqlstate(err);
  return new SerializationError(`fencegate: fenced transaction on ${names}: serialization failure after ${n}${why}: ${err.message} (SQLSTATE ${code})`, {
    sqlstate: code,
    resource: one ? one.resource : null,
    token: one ? one.token : null,
    cause: err,
  });
}

async function attemptOnce(db, ordered, fn) {
  const pooled = isPool(db);
  let client = db;
  if (pooled) {
    try {
      client = await db.connect();
    } catch (e) {
      // The gate refuses a session when it starts (FG007 privileged role,
      // FG005 schema invalid): the same errors as on a connected Client.
      const one = ordered.length === 1 ? ordered[0] : null;
      throw mapError(e, one ? one.resource : null, one ? one.token : null) || e;
    }
  }
  // The connection may end while fencegate holds it (the server terminated
  // the backend, an idle-in-transaction timeout, a lost link): pg then emits
  // 'error' on the client, and a pooled client that is checked out has no
  // listener of its own, so the process would die. The listener keeps the
  // error; the attempt reports it.
  const state = { lost: null };
  const onError = (e) => {
    if (!state.lost) state.lost = e;
  };
  const listens = typeof client.on === 'function';
  if (listens) client.on('error', onError);
  let broken = null;
  try {
    return await onClient(client, ordered, fn, state);
  } catch (e) {
    if (state.lost || (sqlstate(e) === null && !(e instanceof FenceError)) || connectionClass(sqlstate(e))) broken = state.lost || e;
    throw state.lost && !(e instanceof FencegateError) ? state.lost : e;
  } finally {
    if (listens) {
      if (state.lost && !pooled) {
        // A Client of the caller's that broke: nothing it emits later may
        // end the process either.
        client.on('error', () => {});
      }
      client.off?.('error', onError);
    }
    // A connection that failed without a SQLSTATE may be broken: the pool
    // must not hand it out again.
    if (pooled) client.release(broken || undefined);
  }
}

// connectionClass says whether a SQLSTATE means the session is over or its
// link broke: class 08 (connection exception, the gate's 08006 when it lost
// PostgreSQL), 57P01-57P03 (the server shut the session down or cannot
// serve it). During COMMIT such an error leaves the outcome unknown.
export function connectionClass(code) {
  return !!code && (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03');
}

async function onClient(client, ordered, fn, state = { lost: null }) {
  const names = ordered.map((l) => JSON.stringify(l.resource)).join(', ');
  // Errors name the lock they concern: the one being fenced, or the only one.
  let who = ordered.length === 1 ? [ordered[0].resource, ordered[0].token] : [null, null];
  let open = null;
  const onNotice = (n) => {
    if (n && n.code === '25001') open = n; // "there is already a transaction in progress"
  };
  // BEGIN and the first fence go as one round trip where the driver lets
  // them (see BeginAndFence); else BEGIN alone, then each fence.
  const first = ordered[0];
  const both = canPipeline(client) ? new BeginAndFence(client, first) : null;
  let fenced = false;
  if (typeof client.on === 'function') client.on('notice', onNotice);
  try {
    if (both) {
      client.query(both);
      fenced = await both.done;
    } else {
      await client.query('BEGIN');
    }
  } catch (e) {
    if (!both || !both.fenced) throw e;
    // The fence failed (or the connection did): the transaction is
    // aborted, as when the fence fails after a BEGIN of its own.
    await rollbackQuietly(client);
    throw mapError(e, first.resource, first.token) || e;
  } finally {
    if (typeof client.off === 'function') client.off('notice', onNotice);
  }
  if (open) {
    throw new FenceMisuseError(
      `fencegate: fenced transaction on ${names}: the connection already has a transaction open; commit or roll back first, so that the fence comes first`,
      { resource: who[0], token: who[1] },
    );
  }
  let result;
  try {
    for (const lock of fenced ? ordered.slice(1) : ordered) {
      const saved = who;
      who = [lock.resource, lock.token];
      if (lock.proof) await client.query(FENCE_SIGNED_SQL, [lock.resource, lock.token.toString(), lock.proof]);
      else await client.query(FENCE_SQL, [lock.resource, lock.token.toString()]);
      who = saved;
    }
    result = await fn(client);
  } catch (e) {
    await rollbackQuietly(client);
    throw mapError(e, who[0], who[1]) || e;
  }
  const one = ordered.length === 1 ? ordered[0] : null;
  // A connection that ended before COMMIT was sent: nothing committed.
  const lostBefore = state.lost;
  if (lostBefore) throw lostBefore;
  let r;
  try {
    r = await client.query('COMMIT');
  } catch (e) {
    const code = sqlstate(e);
    if (code && !connectionClass(code)) throw mapError(e, one ? one.resource : null, one ? one.token : null) || e;
    if (!code && (lostBefore || /not queryable|Client has already been connected|Cannot use a pool after/i.test(String(e.message)))) {
      // COMMIT never left: the server rolls the transaction back.
      throw lostBefore || e;
    }
    const tokens = ordered.map((l) => `${JSON.stringify(l.resource)} with token ${l.token}`).join(', ');
    throw new CommitUnknownError(
      `fencegate: commit of the transaction fenced on ${tokens}: the connection broke before the answer came (${String(e.message || e).split('\n')[0]}); it may or may not have committed: check the data before redoing it`,
      { resource: one ? one.resource : null, token: one ? one.token : null, cause: e },
    );
  }
  if (r && r.command === 'ROLLBACK') {
    throw new TransactionAbortedError(
      `fencegate: fenced transaction on ${names} was aborted by an error caught inside the callback; it was rolled back and nothing of it committed`,
    );
  }
  return result;
}

// fenceQuery is the statement and the parameters that fence lock.
function fenceQuery(lock) {
  return lock.proof
    ? { text: FENCE_SIGNED_SQL, values: [lock.resource, lock.token.toString(), lock.proof] }
    : { text: FENCE_SQL, values: [lock.resource, lock.token.toString()] };
}

// canPipeline says whether client is a node-postgres Client that
// BeginAndFence can drive: one whose connection writes protocol messages
// and whose last ReadyForQuery status it keeps, not in pg's own pipeline
// mode (which refuses custom queries).
function canPipeline(client) {
  const con = client.connection;
  return (
    !client.pipeline &&
    '_txStatus' in client &&
    !!con &&
    typeof con.parse === 'function' &&
    typeof con.bind === 'function' &&
    typeof con.execute === 'function' &&
    typeof con.sync === 'function'
  );
}

// BeginAndFence is a node-postgres custom query (a "submittable", as
// pg-cursor is) that sends BEGIN and the fence of one lock in one write, as
// the extended protocol's pipelining allows: Parse/Bind/Execute of BEGIN,
// Parse/Bind/Execute of the fence with its parameters bound (never written
// into the statement text), one Sync. PostgreSQL runs them in order; BEGIN
// turns the implicit block into the transaction, so the fence is its first
// statement exactly as when each waits for the other's answer, and an error
// skips what follows to the Sync. That saves the round trip of BEGIN alone.
//
// It decides when pg hands it the connection, all earlier queries of the
// client answered: only on a session whose last ReadyForQuery said idle
// ('I'). Otherwise (a transaction already open) it sends BEGIN alone, in
// the simple protocol as before, so that PostgreSQL's warning 25001 says so
// and nothing is fenced in the caller's transaction. done resolves to
// whether the fence was sent, and rejects with the first error.
class BeginAndFence {
  constructor(client, lock) {
    this.client = client;
    this.fence = fenceQuery(lock);
    this.fenced = false;
    this.done = new Promise((resolve, reject) => {
      this._resolve = resolve;
      this._reject = reject;
    });
  }

  submit(connection) {
    if (this.client._txStatus !== 'I') {
      connection.query('BEGIN');
      return null;
    }
    this.fenced = true;
    const stream = connection.stream;
    if (stream && stream.cork) stream.cork();
    try {
      connection.parse({ text: 'BEGIN' });
      connection.bind({});
      connection.execute({});
      connection.parse({ text: this.fence.text });
      connection.bind({ values: this.fence.values });
      connection.execute({});
      connection.sync();
    } finally {
      if (stream && stream.uncork) stream.uncork();
    }
    return null;
  }

  handleRowDescription() {}

  handleDataRow() {}

  handleCommandComplete() {}

  handleEmptyQuery() {}

  handlePortalSuspended() {}

  handleCopyInResponse(connection) {
    // never asked for: end the copy so the session stays usable
    connection.sendCopyFail('fencegate: unexpected COPY');
  }

  handleCopyData() {}

  handleError(err) {
    this._reject(err);
  }

  handleReadyForQuery() {
    this._resolve(this.fenced);
  }
}

async function rollbackQuietly(client) {
  try {
    await client.query('ROLLBACK');
  } catch {
    // the original error matters, not this one
  }
}
