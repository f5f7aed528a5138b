// Redis masters and the fan-out of one request to all of them.
//
// The wire protocol is the Go lockclient's (docs/protocol.md): a grant is
// SET key value PX ttl NX; an extension and a release are the
// compare-and-pexpire and compare-and-delete scripts below, sent with
// EVALSHA and, when a master answers NOSCRIPT (restarted since), with EVAL.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import Redis from 'ioredis';

// Compare-and-delete: delete the key only while it holds this grant's value.
export const RELEASE_SCRIPT =
  'if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end';
// Compare-and-pexpire: reset the TTL (ARGV[2] ms) only while the key holds
// this grant's value.
export const EXTEND_SCRIPT =
  'if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end';
export const RELEASE_SHA = createHash('sha1').update(RELEASE_SCRIPT).digest('hex');
export const EXTEND_SHA = createHash('sha1').update(EXTEND_SCRIPT).digest('hex');

export const ACQUIRE = 'acquire';
export const EXTEND = 'extend';
export const RELEASE = 'release';

// Per-node state of one fan-out.
export const PENDING = 0;
export const OK = 1;
export const REFUSED = 2;
export const FAILED = 3;
export const SKIPPED = 4;

export const now = () => performance.now();

// An acquisition whose caller stopped waiting before it was sent.
class Late extends Error {}

// parseRedisURL checks a Redis URL or HOST:PORT and returns the node's name
// for messages (host:port or the socket path, never the password) and the
// ioredis options.
export function parseRedisURL(spec) {
  if (typeof spec !== 'string' || !spec.trim()) {
    throw new TypeError(`fencegate: Redis address ${JSON.stringify(spec)} is empty; give redis://HOST:PORT or HOST:PORT`);
  }
  let s = spec.trim();
  if (!s.includes('://')) s = 'redis://' + s;
  let u;
  try {
    u = new URL(s);
  } catch {
    throw new TypeError(`fencegate: Redis address ${JSON.stringify(redact(s))} is not a URL like redis://127.0.0.1:6379`);
  }
  const scheme = u.protocol.replace(/:$/, '');
  if (!['redis', 'rediss', 'unix'].includes(scheme)) {
    throw new TypeError(`fencegate: Redis address scheme ${JSON.stringify(scheme)} is not supported; use redis://, rediss:// or unix://`);
  }
  const opts = {};
  if (u.username) opts.username = decodeURIComponent(u.username);
  if (u.password) opts.password = decodeURIComponent(u.password);
  const db = u.searchParams.get('db');
  if (scheme === 'unix') {
    if (!u.pathname || u.pathname === '/') throw new TypeError('fencegate: unix:// Redis address has no socket path');
    opts.path = decodeURIComponent(u.pathname);
    if (db) opts.db = Number(db);
    return { name: opts.path, options: opts };
  }
  if (!u.hostname || !u.port) {
    throw new TypeError(`fencegate: Redis address ${JSON.stringify(redact(s))} needs a host and a port, e.g. redis://127.0.0.1:6379`);
  }
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  opts.host = host;
  opts.port = Number(u.port);
  const path = u.pathname.replace(/^\//, '');
  if (path) opts.db = Number(path);
  else if (db) opts.db = Number(db);
  if (opts.db !== undefined && !(Number.isInteger(opts.db) && opts.db >= 0)) {
    throw new TypeError(`fencegate: Redis address ${JSON.stringify(redact(s))}: the database is not a number`);
  }
  if (scheme === 'rediss') {
    // The option names of redis-py's URLs, so one URL serves both clients.
    const tls = {};
    const read = (param, what) => {
      const f = u.searchParams.get(param);
      if (!f) return undefined;
      try {
        return readFileSync(f);
      } catch (e) {
        throw new TypeError(`fencegate: Redis address ${u.hostname}:${u.port}: ${param} ${f}: cannot read the ${what} (${e.code || e.message})`);
      }
    };
    const ca = read('ssl_ca_certs', 'CA certificates');
    const cert = read('ssl_certfile', 'client certificate');
    const key = read('ssl_keyfile', 'client key');
    if (ca) tls.ca = ca;
    if (cert) tls.cert = cert;
    if (key) tls.key = key;
    opts.tls = tls;
  }
  const name = u.hostname.includes(':') && !u.hostname.startsWith('[') ? `[${u.hostname}]:${u.port}` : `${u.hostname}:${u.port}`;
  return { name, options: opts };
}

// redact returns url without its user information (user and password):
// everything between the scheme and the last "@".
export function redact(url) {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/).*@/i, '$1***@');
}

// A Redis master. Requests to one master travel over one connection, so they
// reach it in the order sent: the compare-and-delete that undoes a failed
// grant arrives after the SET it undoes. ioredis neither retries a request
// nor re-dials in a loop here: a lock attempt is retried as a whole, and a
// master that is down fails at once; the next request dials again.
export class Node {
  constructor(spec, timeoutMs) {
    const { name, options } = parseRedisURL(spec);
    this.name = name;
    this.timeoutMs = timeoutMs;
    this.options = {
      ...options,
      lazyConnect: true,
      connectTimeout: Math.max(1, Math.ceil(timeoutMs)),
      commandTimeout: Math.max(1, Math.ceil(timeoutMs)),
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      reconnectOnError: () => false,
      autoResendUnfulfilledCommands: false,
      enableOfflineQueue: true,
      enableReadyCheck: false,
      showFriendlyErrorStack: false,
    };
    this.client = null;
    this.connecting = null;
    this.closed = false;
  }

  // ready resolves to a connected client, dialling when there is none; it
  // rejects with the connection's error, or when deadline (ms on now())
  // passes first.
  ready(deadline) {
    if (this.closed) return Promise.reject(new Error('the client is closed'));
    const c = this.client;
    if (c && c.status === 'ready') return Promise.resolve(c);
    if (!this.connecting || !c || c.status === 'end' || c.status === 'close') {
      const nc = new Redis(this.options);
      nc.on('error', (e) => {
        nc.lastError = e;
      });
      this.client = nc;
      this.connecting = nc.connect().then(
        () => nc,
        (e) => {
          nc.disconnect();
          if (this.client === nc) this.connecting = null;
          throw nc.lastError && nc.lastError !== e && /closed/i.test(e.message) ? nc.lastError : e;
        },
      );
      this.connecting.catch(() => {});
    }
    const left = deadline - now();
    if (left <= 0) return Promise.reject(new Late());
    return withTimeout(this.connecting, left, () => new Late());
  }

  // run sends one request; it resolves to true when granted, extended or
  // deleted.
  async run(kind, key, value, ttlMs, deadline) {
    const c = await this.ready(deadline);
    try {
      if (kind === ACQUIRE) {
        // An acquisition whose caller has stopped waiting would only leave a
        // key behind; releases and extensions are sent regardless.
        if (now() >= deadline) throw new Late();
        return (await c.set(key, value, 'PX', ttlMs, 'NX')) === 'OK';
      }
      if (kind === EXTEND) return (await script(c, EXTEND_SHA, EXTEND_SCRIPT, key, value, ttlMs)) === 1;
      return (await script(c, RELEASE_SHA, RELEASE_SCRIPT, key, value)) === 1;
    } catch (e) {
      // A command failed because the connection closed: the reason (a
      // refused password, say) came as the connection's error event.
      if (/Connection is closed/.test(String(e && e.message))) {
        await new Promise((r) => setImmediate(r));
        if (c.lastError) throw c.lastError;
      }
      throw e;
    }
  }

  close() {
    this.closed = true;
    if (this.client) this.client.disconnect();
    this.client = null;
  }
}

async function script(c, sha, source, key, ...args) {
  try {
    return Number(await c.evalsha(sha, 1, key, ...args));
  } catch (e) {
    if (!String(e && e.message).startsWith('NOSCRIPT')) throw e;
    // A master restarted since the script was first sent has forgotten it:
    // EVAL sends the source, which loads it again.
    return Number(await c.eval(source, 1, key, ...args));
  }
}

function withTimeout(p, ms, onTimeout) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(onTimeout()), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

// describe is a one-line description of a node error, without secrets.
export function describe(err) {
  if (err instanceof Late) return "not sent: the attempt's time had run out";
  const msg = String((err && err.message) || err);
  const code = err && err.code;
  if (/^(WRONGPASS|NOAUTH|NOPERM|ERR AUTH|AUTH )/.test(msg) || msg.includes('invalid password') || msg.includes('invalid username-password')) {
    return `authentication failed (${msg.split('\n')[0]})`;
  }
  if (code === 'ECONNREFUSED' || /ECONNREFUSED/.test(msg)) return 'connection refused';
  if (code === 'ETIMEDOUT' || /timed out/i.test(msg)) return 'no answer in time';
  if (code === 'ENOENT') return 'no such socket';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'unknown host';
  if (err && err.name === 'ReplyError') return `error reply (${msg.split('\n')[0]})`;
  if (code && typeof code === 'string' && code.startsWith('E')) return `unreachable (${code})`;
  return `unreachable (${msg.split('\n')[0]})`;
}

// Tally is the replies of one request sent to every node.
export class Tally {
  constructor(n) {
    this.state = new Array(n).fill(PENDING);
    this.ok = 0;
    this.no = 0; // refused + failed
    this.errors = {};
  }

  names(nodes, st) {
    return nodes.filter((_, i) => this.state[i] === st).map((n) => n.name);
  }
}

// fanout sends one request to every node at once and counts the replies as
// they arrive. With waitAll false it resolves as soon as a quorum said yes
// or a quorum can no longer be reached; with waitAll true it waits for every
// node. A node that has not answered within the node timeout counts as
// failed.
export function fanout(nodes, timeoutMs, kind, key, value, ttlMs, { skip = null, waitAll = false } = {}) {
  const n = nodes.length;
  const quorum = Math.floor(n / 2) + 1;
  const t = new Tally(n);
  const deadline = now() + timeoutMs;
  let pending = 0;
  return new Promise((resolve) => {
    let done = false;
    let timer = null;
    const finish = () => {
      if (done) return;
      done = true;
      if (timer) clearTimeout(timer);
      resolve(t);
    };
    const check = () => {
      if (pending === 0 || (!waitAll && (t.ok >= quorum || t.no > n - quorum))) finish();
    };
    for (let i = 0; i < n; i++) {
      if (skip && skip[i]) {
        t.state[i] = SKIPPED;
        continue;
      }
      pending++;
      nodes[i].run(kind, key, value, ttlMs, deadline).then(
        (ok) => {
          if (done) return;
          pending--;
          if (ok) {
            t.state[i] = OK;
            t.ok++;
          } else {
            t.state[i] = REFUSED;
            t.no++;
          }
          check();
        },
        (e) => {
          if (done) return;
          pending--;
          t.state[i] = FAILED;
          t.no++;
          t.errors[nodes[i].name] = describe(e);
          check();
        },
      );
    }
    if (pending === 0) return finish();
    timer = setTimeout(() => {
      for (let i = 0; i < n; i++) {
        if (t.state[i] === PENDING) {
          t.state[i] = FAILED;
          t.no++;
          t.errors[nodes[i].name] = `no answer within ${timeoutMs / 1000}s`;
        }
      }
      finish();
    }, Math.max(0, deadline - now()));
  });
}
