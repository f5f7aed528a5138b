// A held lock: its token, its lease, refresh, release and fenced
// transactions.

import { EventEmitter } from 'node:events';
import { LockError, LockLostError, LockReleasedError } from './errors.js';
import { transaction } from './fence.js';
import { REFUSED, RELEASE, now } from './nodes.js';

const HELD = 'held';
const LOST = 'lost';
const RELEASED = 'released';

// Lock is a held lock. It emits 'lost' (with the LockLostError) as soon as
// the lease is known lost. Knowing the lease is lost does not stop a write
// already on its way: only the fence, checked by PostgreSQL inside the
// writing transaction (transaction()), does that.
export class Lock extends EventEmitter {
  constructor(client, resource, key, value, token, proof, validUntil) {
    super();
    this._client = client;
    this.resource = resource;
    this.token = token; // a bigint > 0, or null (efficiency lock)
    this.proof = proof; // KEYID.HEX, or null
    this._key = key;
    this._value = value;
    this._state = HELD;
    this._reason = '';
    this._release = null;
    this._timer = null;
    this._watchdog = null;
    this._setValidUntil(validUntil);
    client._locks.add(this);
    if (client.refreshEveryMs !== null) {
      this._watchdog = setInterval(() => this._watch(), client.refreshEveryMs);
      this._watchdog.unref();
    }
  }

  _setValidUntil(mono) {
    this._validUntil = mono;
    this._validUntilDate = new Date(Date.now() + (mono - now()));
    if (this._timer) clearTimeout(this._timer);
    this._timer = setTimeout(() => this._checkValidity(), Math.max(0, mono - now()) + 1);
    this._timer.unref();
  }

  // Until when the lock is held for sure (unless a Redis master restarts
  // without persistence): the start of the last successful grant or
  // extension + TTL - drift, measured on the monotonic clock.
  get validUntil() {
    return this._validUntilDate;
  }

  // Milliseconds left until validUntil (negative once it has passed).
  remaining() {
    return this._validUntil - now();
  }

  // True as soon as the lease is known lost: the validity passed (compared
  // with the clock on every look, so a process resumed after a pause sees
  // it at once), a refresh found a majority no longer holding it, or an
  // extension came back too late. release() does not set it.
  get lost() {
    this._checkValidity();
    return this._state === LOST;
  }

  // Neither lost nor released.
  get held() {
    this._checkValidity();
    return this._state === HELD;
  }

  _checkValidity() {
    if (this._state !== HELD) return false;
    if (now() < this._validUntil) return true;
    this._lose('its validity passed');
    return false;
  }

  _lose(reason) {
    if (this._state === HELD) {
      this._state = LOST;
      this._reason = reason;
      this._stopTimers();
      this._client._locks.delete(this);
      const err = new LockLostError(`fencegate: lock ${JSON.stringify(this.resource)} lost: ${reason}`);
      this._client._warn(`fencegate: lock ${JSON.stringify(this.resource)} (token ${this.token}) lost: ${reason}`);
      if (this.listenerCount('lost') > 0) this.emit('lost', err);
    }
    return new LockLostError(`fencegate: lock ${JSON.stringify(this.resource)} lost: ${this._reason}`);
  }

  _stopTimers() {
    if (this._timer) clearTimeout(this._timer);
    if (this._watchdog) clearInterval(this._watchdog);
    this._timer = null;
    this._watchdog = null;
  }

  _raiseIfEnded(what) {
    if (this._state === RELEASED) throw new LockReleasedError(`fencegate: ${what} ${JSON.stringify(this.resource)}: the lock was released`);
    if (this._state === LOST) throw new LockLostError(`fencegate: ${what} ${JSON.stringify(this.resource)}: the lock was lost: ${this._reason}`);
  }

  // refresh extends the lock to a full TTL from now on every node where it
  // still holds this grant (compare-and-pexpire), counting the extension
  // only when a majority did so within the new validity. LockLostError when
  // a majority answers that the lock is no longer held or the answer came
  // after the validity passed; NotAcquiredError when nodes failed without a
  // majority refusing (the lock then stays held until validUntil).
  async refresh() {
    this._checkValidity();
    this._raiseIfEnded('refresh');
    const { validUntil, tally } = await this._client._extend(this._key, this._value);
    this._raiseIfEnded('refresh');
    if (now() >= this._validUntil) {
      // Between the old validity and now the lock may have expired and
      // been taken by someone else.
      throw this._lose('the extension came after the validity passed');
    }
    if (validUntil !== null) {
      if (validUntil > this._validUntil) this._setValidUntil(validUntil);
      return;
    }
    const c = this._client;
    const refused = tally.state.filter((s) => s === REFUSED).length;
    if (c._nodes.length - refused < c.quorum) {
      throw this._lose(`no longer held by a majority (${refused} of ${c._nodes.length} nodes hold no or another value)`);
    }
    throw c._notAcquired(this.resource, tally, { reason: 'refresh failed; the lock stays held until its validUntil' });
  }

  // release deletes the lock on every node where it still holds this
  // grant's value (compare-and-delete): it never deletes a lock another
  // client took after this one expired. Idempotent: later calls resolve (or
  // reject) as the first did. LockLostError when the lock had been lost or
  // fewer than a quorum still held it; LockError when nodes could not be
  // reached (the lock then expires after its TTL).
  release() {
    if (!this._release) this._release = this._doRelease();
    return this._release;
  }

  async _doRelease() {
    this._checkValidity();
    const wasLost = this._state === LOST;
    if (this._state === HELD) this._state = RELEASED;
    this._stopTimers();
    const c = this._client;
    c._locks.delete(this);
    const t = await c._fanout(RELEASE, this._key, this._value, { waitAll: true });
    const n = c._nodes.length;
    if (wasLost) throw new LockLostError(`fencegate: release ${JSON.stringify(this.resource)}: the lock had been lost: ${this._reason}`);
    if (t.ok >= c.quorum) return;
    const errs = Object.entries(t.errors);
    if (errs.length) {
      throw new LockError(`fencegate: release ${JSON.stringify(this.resource)}: deleted on ${t.ok} of ${n} nodes: ${errs.map(([k, v]) => `${k}: ${v}`).join('; ')}`);
    }
    throw new LockLostError(`fencegate: release ${JSON.stringify(this.resource)}: held by only ${t.ok} of ${n} nodes (it had expired)`);
  }

  async _watch() {
    if (this._refreshing || this._state !== HELD) return;
    this._refreshing = true;
    try {
      await this.refresh();
    } catch (e) {
      if (!(e instanceof LockLostError || e instanceof LockReleasedError)) {
        this._client._warn(`fencegate: auto-refresh of ${JSON.stringify(this.resource)} failed; retrying at the next tick: ${e.message}`);
      }
    } finally {
      this._refreshing = false;
    }
  }

  // transaction runs fn in a fenced transaction on a pg Client or Pool:
  // BEGIN, SELECT fencegate.fence(resource, token[, proof]) before anything
  // else, fn(client), COMMIT. See fence.js.
  transaction(db, fn) {
    return transaction(db, [this], fn);
  }

  toString() {
    return `<fencegate.Lock resource=${JSON.stringify(this.resource)} token=${this.token} ${this._state}>`;
  }
}
