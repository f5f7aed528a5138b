// LockClient: Redis locks (one node or Redlock) with fencing tokens.

import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { NotAcquiredError, TokenServiceError } from './errors.js';
import { Lock } from './lock.js';
import { ACQUIRE, EXTEND, FAILED, Node, OK, RELEASE, REFUSED, fanout, now } from './nodes.js';
import { TokenClient, checkResource } from './tokens.js';

// The default prefix of the Redis keys: a lock on resource R is the key
// "fencegate:lock:R", as in the Go and Python clients.
export const DEFAULT_KEY_PREFIX = 'fencegate:lock:';

function jitter(d) {
  return d / 2 + (Math.random() * d) / 2;
}

// Retry strategies: given the attempt number (1 for the first retry), the
// milliseconds to wait before it, or null to stop retrying.
export const noRetry = () => () => null;
export const fixedRetry = (delayMs) => () => jitter(delayMs);
export const exponentialRetry = (minMs, maxMs) => (attempt) => jitter(Math.min(maxMs, minMs * 2 ** Math.min(attempt - 1, 32)));

const positive = (x) => typeof x === 'number' && Number.isFinite(x) && x > 0;

// LockClient takes locks on one Redis (single-node mode) or on N independent
// Redis masters (Redlock: a lock needs N/2+1 of them), each with a fencing
// token from the fencegate token service.
export class LockClient {
  constructor({
    redisUrls,
    tokenServers = null,
    ttlMs = 10000,
    tls = null,
    credentialsFile = null,
    acquireTimeoutMs = 30000,
    autoRefresh = false,
    refreshEveryMs = null,
    nodeTimeoutMs = 100,
    driftFactor = 0.01,
    retry = null,
    keyPrefix = DEFAULT_KEY_PREFIX,
    tokenTimeoutMs = 3000,
    tokenMaxWaitMs = 30000,
    tokenSource = null,
    txRetries = 5,
    logger = null,
  } = {}) {
    if (typeof redisUrls === 'string') throw new TypeError("fencegate: redisUrls is a list of URLs, e.g. ['redis://127.0.0.1:6379']");
    const urls = [...(redisUrls || [])];
    if (!urls.length) throw new TypeError('fencegate: no Redis nodes given; pass one URL (single node) or several independent masters (Redlock)');
    if (!(Number.isInteger(ttlMs) && ttlMs >= 10)) throw new RangeError(`fencegate: ttlMs ${ttlMs} is too short; use at least 10 milliseconds`);
    if (!positive(nodeTimeoutMs)) throw new RangeError(`fencegate: nodeTimeoutMs ${nodeTimeoutMs} must be a positive number of milliseconds`);
    if (!(typeof driftFactor === 'number' && driftFactor >= 0 && driftFactor < 0.5)) throw new RangeError(`fencegate: driftFactor ${driftFactor} must be in [0, 0.5)`);
    if (!(positive(acquireTimeoutMs) || acquireTimeoutMs === Infinity)) {
      throw new RangeError(`fencegate: acquireTimeoutMs ${acquireTimeoutMs} must be a positive number of milliseconds`);
    }
    if (!(Number.isInteger(txRetries) && txRetries >= 0)) throw new RangeError(`fencegate: txRetries ${txRetries} must be an integer >= 0`);
    this.refreshEveryMs = null;
    if (autoRefresh) {
      const every = refreshEveryMs ?? ttlMs / 3;
      if (!positive(every) || every >= ttlMs) throw new RangeError(`fencegate: refreshEveryMs ${refreshEveryMs} must be positive and shorter than the ttlMs ${ttlMs}`);
      this.refreshEveryMs = every;
    }
    if (typeof tokenServers === 'string') throw new TypeError("fencegate: tokenServers is a list of URLs, e.g. ['http://127.0.0.1:7101']");
    if (tokenSource && tokenServers && tokenServers.length) throw new TypeError('fencegate: give tokenServers or tokenSource, not both');
    this.ttlMs = ttlMs;
    this.nodeTimeoutMs = nodeTimeoutMs;
    this.keyPrefix = keyPrefix;
    this.acquireTimeoutMs = acquireTimeoutMs;
    this.retry = retry || exponentialRetry(5, 250);
    this.driftMs = ttlMs * driftFactor + 2;
    this.txRetries = txRetries;
    this.logger = logger;
    this._nodes = urls.map((u) => new Node(u, nodeTimeoutMs));
    const names = this._nodes.map((n) => n.name);
    const dup = names.find((n, i) => names.indexOf(n) !== i);
    if (dup !== undefined) throw new TypeError(`fencegate: Redis node ${dup} is given twice; Redlock needs independent masters, each counted once`);
    this.quorum = Math.floor(this._nodes.length / 2) + 1;
    this._tokens = tokenSource;
    this._ownsTokens = false;
    if (tokenServers && tokenServers.length) {
      this._tokens = new TokenClient(tokenServers, { tls, credentialsFile, attemptTimeoutMs: tokenTimeoutMs, maxWaitMs: tokenMaxWaitMs });
      this._ownsTokens = true;
    } else if (tls || credentialsFile) {
      throw new TypeError('fencegate: tls and credentialsFile are for tokenServers; none given');
    }
    this.tokenMaxWaitMs = tokenMaxWaitMs;
    this._locks = new Set();
    this.closed = false;
  }

  // True when locks carry fencing tokens (the client has token servers).
  get fenced() {
    return this._tokens !== null && this._tokens !== undefined;
  }

  // The Redis nodes' names (host:port).
  get nodes() {
    return this._nodes.map((n) => n.name);
  }

  // close closes the Redis connections and the token client and stops the
  // locks' timers. Locks still held expire after their TTL.
  async close() {
    this.closed = true;
    for (const l of this._locks) l._stopTimers();
    this._locks.clear();
    for (const n of this._nodes) n.close();
    if (this._ownsTokens) this._tokens.close();
  }

  // acquire takes the lock on resource, retrying after a random delay while
  // another client holds it, for at most timeoutMs (the client's
  // acquireTimeoutMs when not given; Infinity waits without bound). The
  // token is part of that time: once granted, minting it takes at most
  // tokenMaxWaitMs, never past timeoutMs nor past the grant's validity. It
  // resolves only after the lock was granted on a majority, a fencing token
  // was minted, and the lock was confirmed still held and extended.
  async acquire(resource, { timeoutMs } = {}) {
    checkResource(resource);
    const limit = timeoutMs ?? this.acquireTimeoutMs;
    if (!(positive(limit) || limit === Infinity || limit === 0)) throw new RangeError(`fencegate: timeoutMs ${timeoutMs} must be a number of milliseconds >= 0`);
    const deadline = now() + limit;
    let outageSince = null;
    for (let attempt = 1; ; attempt++) {
      let last;
      const started = now();
      try {
        return await this._tryAcquire(resource, deadline);
      } catch (e) {
        if (!(e instanceof NotAcquiredError)) throw e;
        last = e;
      }
      // What retrying cannot bring ends the call now, whatever the timeout:
      // nodes that reject the credentials, the ACL or the protocol; nodes
      // that stay unreachable for MAX_UNREACHABLE_MS. A held lock waits.
      const verdict = diagnose(last);
      if (verdict === 'hopeless') {
        throw giveUp(last, 'the Redis nodes reject this client: fix the password, user or ACL in the Redis URLs, or the scheme (redis:// or rediss://)');
      }
      if (verdict === 'outage') {
        if (outageSince === null) outageSince = started;
        const d = this.retry(attempt) ?? 0;
        if (now() + d - outageSince >= MAX_UNREACHABLE_MS) {
          throw giveUp(
            last,
            `too few Redis nodes reachable for ${((now() - outageSince) / 1000).toFixed(1)} s: check that the servers run at the addresses of the Redis URLs and that the scheme (redis:// or rediss://) is theirs`,
          );
        }
      } else outageSince = null;
      const left = deadline - now();
      if (left <= 0) throw last;
      const d = this.retry(attempt);
      if (d === null || d === undefined) throw last;
      if (d >= left) {
        await sleep(left);
        throw last;
      }
      await sleep(d);
    }
  }

  // tryAcquire makes one attempt; NotAcquiredError when another client
  // holds the lock (see .taken).
  async tryAcquire(resource) {
    checkResource(resource);
    return this._tryAcquire(resource);
  }

  async _tryAcquire(resource, deadline = Infinity) {
    if (this.closed) throw new TypeError('fencegate: the LockClient is closed');
    const key = this.keyPrefix + resource;
    const value = randomBytes(16).toString('hex');
    const { validUntil, taken } = await this._grant(resource, key, value);
    if (!this.fenced) return new Lock(this, resource, key, value, null, null, validUntil);
    let token;
    let proof;
    try {
      // A token after the grant's validity or the caller's deadline is of
      // no use: the wait for it ends at the earlier of the two.
      const wait = Math.min(this.tokenMaxWaitMs, validUntil - now(), deadline - now());
      ({ token, proof } = await this._nextToken(resource, Math.max(wait, 1)));
    } catch (e) {
      await this._cleanup(key, value, taken);
      throw e;
    }
    if (typeof token !== 'bigint' || token <= 0n) {
      await this._cleanup(key, value, taken);
      throw new TokenServiceError(`fencegate: the token source returned ${String(token)} for ${JSON.stringify(resource)}; a token is a bigint > 0`, { kind: 'bad_answer' });
    }
    if (proof !== null && proof !== undefined && !(typeof proof === 'string' && proof)) {
      await this._cleanup(key, value, taken);
      throw new TokenServiceError(`fencegate: the token source returned a proof for ${JSON.stringify(resource)} that is not a non-empty string`, { kind: 'bad_answer' });
    }
    // Confirm: the key still holds our value on a majority, so nobody else
    // was granted the lock between our grant and the token; extending it
    // gives the caller a full validity to use the token in.
    const ext = await this._extend(key, value);
    if (ext.validUntil === null) {
      await this._cleanup(key, value, taken);
      throw this._notAcquired(resource, ext.tally, { reason: 'lost between the grant and the token; the token was not used' });
    }
    return new Lock(this, resource, key, value, token, proof || null, ext.validUntil);
  }

  async _nextToken(resource, timeoutMs) {
    const src = this._tokens;
    if (typeof src.next === 'function') {
      const t = await src.next(resource, { timeoutMs });
      return { token: t.token, proof: t.proof ?? null };
    }
    return { token: await src.nextToken(resource, { timeoutMs }), proof: null };
  }

  // _grant runs one round of SET NX PX on every node; success on a majority
  // within the validity (TTL - elapsed - drift). On failure it deletes the
  // key (compare-and-delete) wherever it may have been set.
  async _grant(resource, key, value) {
    const start = now();
    const t = await this._fanout(ACQUIRE, key, value);
    const validUntil = start + this.ttlMs - this.driftMs;
    const taken = t.state.map((s) => s === REFUSED);
    if (t.ok >= this.quorum && now() < validUntil) return { validUntil, taken };
    await this._cleanup(key, value, taken);
    throw this._notAcquired(resource, t, { expired: t.ok >= this.quorum });
  }

  // _extend runs compare-and-pexpire on every node: the new validity when a
  // majority extended within it, else null.
  async _extend(key, value) {
    const start = now();
    const tally = await this._fanout(EXTEND, key, value);
    const validUntil = start + this.ttlMs - this.driftMs;
    if (tally.ok >= this.quorum && now() < validUntil) return { validUntil, tally };
    return { validUntil: null, tally };
  }

  // _cleanup runs compare-and-delete on every node not in skip and waits for
  // the answers (at most the node timeout): a half-taken lock must not stay.
  _cleanup(key, value, skip) {
    return this._fanout(RELEASE, key, value, { skip, waitAll: true });
  }

  _fanout(kind, key, value, opts) {
    return fanout(this._nodes, this.nodeTimeoutMs, kind, key, value, this.ttlMs, opts);
  }

  _notAcquired(resource, t, { expired = false, reason = '' } = {}) {
    return new NotAcquiredError(resource, {
      nodes: this._nodes.length,
      quorum: this.quorum,
      granted: t.names(this._nodes, OK),
      taken: t.names(this._nodes, REFUSED),
      failed: t.names(this._nodes, FAILED),
      expired,
      nodeErrors: t.errors,
      reason,
    });
  }

  _warn(msg) {
    if (this.logger && typeof this.logger.warn === 'function') this.logger.warn(msg);
  }
}

// MAX_UNREACHABLE_MS is how long acquire() keeps trying while too few Redis
// nodes can be reached (refused, no answer, a TLS handshake that never
// completes); a lock held by another client is waited for until the timeout.
export const MAX_UNREACHABLE_MS = 2000;

const BUSY_REPLIES = ['LOADING', 'BUSY', 'TRYAGAIN', 'MASTERDOWN'];

// diagnose says what a failed attempt means for the next: 'hopeless' when
// more nodes reject this client (credentials, ACL, protocol) than the
// quorum can spare, 'outage' when too few nodes answered, else 'busy'.
function diagnose(e) {
  let permanent = 0;
  for (const n of e.failed) {
    const what = e.nodeErrors[n] || '';
    if (what.startsWith('authentication failed') || (what.startsWith('error reply') && !BUSY_REPLIES.some((b) => what.includes(b)))) permanent++;
  }
  if (permanent > e.nodes - e.quorum) return 'hopeless';
  if (e.nodes - e.failed.length < e.quorum || e.expired) return 'outage';
  return 'busy';
}

function giveUp(e, reason) {
  return new NotAcquiredError(e.resource, {
    nodes: e.nodes,
    quorum: e.quorum,
    granted: e.granted,
    taken: e.taken,
    failed: e.failed,
    expired: e.expired,
    nodeErrors: e.nodeErrors,
    reason,
  });
}
