// TokenClient: the fencegate token service's HTTP/JSON API over node:http
// and node:https (docs/protocol.md, section 5).

import http from 'node:http';
import https from 'node:https';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { TokenAuthError, TokenRequestError, TokenServiceError, TokenUnavailableError } from './errors.js';

// The longest resource name the token service takes, in bytes.
export const MAX_RESOURCE_BYTES = 1024;

export const LEADER_HEADER = 'x-fencegate-leader-api';
export const LEADER_ID_HEADER = 'x-fencegate-leader-id';

// Kinds of a node's answer that another try of the same node cannot turn
// into a token: when a whole round of nodes answered only these, the call
// gives up at once.
const DEAD_ENDS = new Set(['refused', 'unknown_host', 'bad_answer']);

// How long every node must keep closing connections without an HTTP answer
// before the call believes that no token service listens there: PostgreSQL
// and Redis do that to an HTTP request, but so does a token node at its
// connection cap, for a moment.
const EOF_GRACE_MS = 1000;

// What to do about a node that is not the token API.
const FIX_URL = "check the server URLs: each must be a token node's API address, e.g. http://127.0.0.1:7101";
const FIX_CA = "give the client the cluster's CA: tls: { ca: 'ca.pem' }";
const FIX_HTTPS = 'that port speaks TLS: write https:// and give tls.ca';
const FIX_PLAIN = 'write http://, or the port where the node serves TLS';
const EOF_REASON = 'closed the connection without an HTTP answer (PostgreSQL, Redis or another server listens there, or a token node at its connection cap)';

// A proof's text form: KEYID.HEX.
const PROOF_RE = /^[A-Za-z0-9_-]{1,64}\.[0-9a-f]{64}$/;

const now = () => performance.now();

// The most resources one batch request names (the service takes 4096).
const MAX_BATCH = 256;
const MAX_BATCH_BYTES = 48 << 10;

// How long after its limit a call's own timer refuses it, when the request
// it waits for has not given up by itself.
const TIMER_SLACK_MS = 25;

// readToken checks one answer item (the single form's answer, or an item
// of the batch form's tokens) for resource and returns the token; outer
// holds the Raft entry's term, index and leader.
function readToken(resource, item, outer) {
  const short = () => JSON.stringify(item, (_, v) => (typeof v === 'bigint' ? v.toString() : v)).slice(0, 200);
  if (item === null || typeof item !== 'object' || Array.isArray(item)) {
    throw new TokenServiceError(`fencegate: token for ${JSON.stringify(resource)}: the answer is not a JSON object`, { kind: 'bad_answer' });
  }
  if (item.resource !== undefined && item.resource !== resource) {
    throw new TokenServiceError(`fencegate: token for ${JSON.stringify(resource)}: the answer is for another resource: ${short()}`, { kind: 'bad_answer' });
  }
  const tok = item.token;
  if (typeof tok !== 'bigint' || tok <= 0n || tok >= 1n << 63n) {
    throw new TokenServiceError(`fencegate: token for ${JSON.stringify(resource)}: the answer holds no token > 0: ${short()}`, { kind: 'bad_answer' });
  }
  const proof = item.proof;
  if (proof !== undefined && proof !== null && !(typeof proof === 'string' && (proof === '' || PROOF_RE.test(proof)))) {
    throw new TokenServiceError(
      `fencegate: token for ${JSON.stringify(resource)}: the answer's proof is not of the form KEYID.HEX: ${JSON.stringify(String(proof).slice(0, 80))}`,
      { kind: 'bad_answer' },
    );
  }
  return {
    resource,
    token: tok,
    proof: proof || null,
    term: typeof outer.term === 'bigint' ? Number(outer.term) : 0,
    index: typeof outer.index === 'bigint' ? Number(outer.index) : 0,
    leader: typeof outer.leader === 'string' ? outer.leader : '',
  };
}

// RESOURCE_SPACES lists the characters a resource name may not consist of
// alone: Unicode White_Space, as the Go service's unicode.IsSpace
// (tokenapi.ResourceSpaces). Not String.prototype.trim's set, which also
// holds the BOM (U+FEFF) and lacks NEL (U+0085).
export const RESOURCE_SPACES = new Set(
  '\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000',
);

// checkResource applies the one resource-name rule the service and every
// client share (tokenapi.ValidateResource; tokenapi/testdata/
// resource-names.json holds it case by case), before anything is sent: a
// string, not empty nor only white space, valid UTF-8 (no lone surrogate),
// no NUL, no U+FFFD, at most 1024 bytes as UTF-8.
export function checkResource(resource) {
  if (typeof resource !== 'string' || [...resource].every((ch) => RESOURCE_SPACES.has(ch))) {
    throw new TypeError(`fencegate: resource ${JSON.stringify(resource)} is empty; name the resource the lock protects`);
  }
  if (resource.includes('\0')) {
    throw new TypeError('fencegate: resource name holds a NUL character; PostgreSQL text cannot store it');
  }
  if (!wellFormed(resource)) {
    throw new TypeError('fencegate: resource name is not valid UTF-8 (it holds a lone surrogate)');
  }
  if (resource.includes('\ufffd')) {
    throw new TypeError('fencegate: resource name holds U+FFFD, the mark of bytes that were not UTF-8');
  }
  const n = Buffer.byteLength(resource, 'utf8');
  if (n > MAX_RESOURCE_BYTES) {
    throw new RangeError(`fencegate: resource name is ${n} bytes; keep it to at most ${MAX_RESOURCE_BYTES}`);
  }
}

function wellFormed(s) {
  if (typeof s.isWellFormed === 'function') return s.isWellFormed();
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}

// parseJSON parses a JSON text with every integer literal kept exact: each
// integer becomes a BigInt, so a token beyond 2^53 loses nothing.
export function parseJSON(text) {
  let out = '';
  let i = 0;
  const n = text.length;
  while (i < n) {
    const ch = text[i];
    if (ch === '"') {
      let j = i + 1;
      while (j < n && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
    } else if (ch === '-' || (ch >= '0' && ch <= '9')) {
      let j = i + 1;
      while (j < n && /[0-9eE.+-]/.test(text[j])) j++;
      const lit = text.slice(i, j);
      out += /^-?\d+$/.test(lit) ? `{"\\u0000int":"${lit}"}` : lit;
      i = j;
    } else {
      out += ch;
      i++;
    }
  }
  return JSON.parse(out, (_, v) =>
    v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 1 && typeof v['\u0000int'] === 'string'
      ? BigInt(v['\u0000int'])
      : v,
  );
}

// normalizeURL returns scheme://host:port for a URL or HOST:PORT.
export function normalizeURL(s, defaultScheme = 'http') {
  if (typeof s !== 'string' || !s.trim()) {
    throw new TypeError(`fencegate: token server address ${JSON.stringify(s)} is empty; give a URL like http://127.0.0.1:7101`);
  }
  s = s.trim();
  if (!s.includes('://')) s = `${defaultScheme}://${s}`;
  let u;
  try {
    u = new URL(s);
  } catch {
    throw new TypeError(`fencegate: token server ${JSON.stringify(s)} is not a URL like http://127.0.0.1:7101 or a HOST:PORT`);
  }
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || !u.hostname) {
    throw new TypeError(`fencegate: token server ${JSON.stringify(s)} is not a URL like http://127.0.0.1:7101 or a HOST:PORT`);
  }
  if (u.username || u.password) {
    throw new TypeError('fencegate: a token server URL carries no credentials; use the credentialsFile option');
  }
  if (!u.port) throw new TypeError(`fencegate: token server ${JSON.stringify(s)} has no port; write HOST:PORT`);
  return `${u.protocol}//${u.host}`;
}

function isLoopback(host) {
  host = host.replace(/^\[(.*)\]$/, '$1');
  return host === 'localhost' || host.startsWith('127.') || host === '::1';
}

// An answer of one node to one request.
class Attempt extends Error {
  constructor(kind, message, { retryable, leaderApi = '', leaderId = '', fix = '', eof = false }) {
    super(message);
    this.kind = kind;
    this.retryable = retryable;
    this.leaderApi = leaderApi;
    this.leaderId = leaderId;
    this.fix = fix; // what to do, for an answer that is not the token API
    this.eof = eof; // the connection closed without an HTTP answer
  }
}

// TokenClient is a client of the fencegate token service: it sends each call
// to the node that answered last, follows the leader a node names, fails
// over to the other nodes and retries retryable answers with exponential
// backoff and full jitter until the call's time runs out. It gives up at
// once on a bad request, failed authentication, and when every node refused
// the connection or is not the token API.
export class TokenClient {
  constructor(servers, { tls = null, credentialsFile = null, attemptTimeoutMs = 3000, maxWaitMs = 30000, backoffMs = [20, 1000], followLeader = true } = {}) {
    if (typeof servers === 'string') throw new TypeError("fencegate: tokenServers is a list of URLs, e.g. ['http://127.0.0.1:7101']");
    const useTLS = !!(tls && (tls.ca || tls.cert || tls.key));
    const urls = [];
    for (const s of servers || []) {
      const u = normalizeURL(s, useTLS ? 'https' : 'http');
      if (!urls.includes(u)) urls.push(u);
    }
    if (!urls.length) throw new TypeError('fencegate: no token servers given; give the API URL of at least one node, e.g. http://127.0.0.1:7101');
    if (useTLS) {
      const plain = urls.find((u) => u.startsWith('http://'));
      if (plain) throw new TypeError(`fencegate: TLS options given but ${plain} is http://; write https:// (or HOST:PORT)`);
    }
    for (const [name, v] of [['tokenTimeoutMs', attemptTimeoutMs], ['tokenMaxWaitMs', maxWaitMs]]) {
      if (!(typeof v === 'number' && Number.isFinite(v) && v > 0)) throw new TypeError(`fencegate: ${name} ${v} must be a positive number of milliseconds`);
    }
    this.tlsOptions = {};
    if (tls) {
      if (tls.key && !tls.cert) throw new TypeError('fencegate: tls.key given without tls.cert; give both');
      if (tls.cert && !tls.key) throw new TypeError('fencegate: tls.cert given without tls.key; give both');
      for (const [k, what] of [['ca', 'CA certificates'], ['cert', 'client certificate'], ['key', 'client key']]) {
        if (!tls[k]) continue;
        try {
          this.tlsOptions[k] = readFileSync(tls[k]);
        } catch (e) {
          throw new TypeError(`fencegate: tls.${k} ${tls[k]}: cannot read the ${what} (${e.code || e.message})`);
        }
      }
    }
    this.auth = null;
    if (credentialsFile != null) {
      this.auth = readCredentials(credentialsFile);
      for (const u of urls) {
        if (u.startsWith('http://') && !isLoopback(new URL(u).hostname)) {
          throw new TypeError(`fencegate: bearer credentials would cross the network in clear text to ${u}; use https://`);
        }
      }
    }
    this.attemptTimeoutMs = attemptTimeoutMs;
    this.maxWaitMs = maxWaitMs;
    this.backoffMs = backoffMs;
    this.followLeader = followLeader;
    this.servers = urls;
    this.given = [...urls];
    this.pinned = new Map(); // followed https URL -> the leader ID it was followed for
    this.httpsOnly = urls.every((u) => u.startsWith('https://'));
    this.preferred = 0;
    this.waiting = []; // calls of next() not yet sent
    this.sending = false;
    this.httpAgent = new http.Agent({ keepAlive: true, maxSockets: 64 });
    this.httpsAgent = new https.Agent({ keepAlive: true, maxSockets: 64, ...this.tlsOptions });
  }

  close() {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }

  // next returns a new fencing token for resource (a BigInt), greater than
  // every token any node returned before the call started, with its proof
  // (null when the service does not sign) and the Raft entry that minted it.
  //
  // Calls made while another request is in flight wait for it and then go
  // together in one batch request (POST /v1/tokens {"resources": [...]}),
  // as the Go client coalesces them: a batch is sent after every one of its
  // calls started, so each token is still greater than every token returned
  // before its call. A call alone is sent alone, in the single form. Each
  // call keeps its own time limit (timeoutMs, else the client's maxWaitMs).
  async next(resource, { timeoutMs } = {}) {
    checkResource(resource);
    return new Promise((resolve, reject) => {
      const limit = Math.max(timeoutMs ?? this.maxWaitMs, 0);
      const w = { resource, deadline: now() + limit, settled: false, timer: null };
      const settle = (f) => (v) => {
        if (w.settled) return;
        w.settled = true;
        clearTimeout(w.timer);
        f(v);
      };
      w.resolve = settle(resolve);
      w.reject = settle(reject);
      // A backstop for a call that waits behind another request, or in a
      // batch for longer than its own limit; a request of its own gives up
      // at the limit by itself, naming what each node answered.
      w.timer = setTimeout(
        () => w.reject(new TokenUnavailableError(`fencegate: token for ${JSON.stringify(resource)}: no token within the call's time`, { kind: 'timeout', nodeErrors: {} })),
        limit + TIMER_SLACK_MS,
      );
      w.timer.unref?.();
      this.waiting.push(w);
      if (!this.sending) this.drain();
    });
  }

  // drain sends the waiting calls, one request at a time, until none waits.
  async drain() {
    this.sending = true;
    try {
      while (this.waiting.length) {
        // A batch holds at most MAX_BATCH calls and MAX_BATCH_BYTES of
        // names as JSON encodes them (a control character takes six bytes),
        // under the service's 64 KiB body limit; the first call always goes.
        const batch = [];
        let bytes = 0;
        while (this.waiting.length && batch.length < MAX_BATCH) {
          const w = this.waiting[0];
          if (w.settled) {
            this.waiting.shift();
            continue;
          }
          const size = Buffer.byteLength(JSON.stringify(w.resource), 'utf8') + 1;
          if (batch.length && bytes + size > MAX_BATCH_BYTES) break;
          bytes += size;
          batch.push(this.waiting.shift());
        }
        if (batch.length === 0) continue;
        if (batch.length === 1) {
          const w = batch[0];
          try {
            w.resolve(await this.nextOne(w.resource, Math.max(w.deadline - now(), 0)));
          } catch (e) {
            w.reject(e);
          }
          continue;
        }
        await this.nextBatch(batch);
      }
    } finally {
      this.sending = false;
    }
  }

  // nextOne asks for one token in the single form.
  async nextOne(resource, timeoutMs) {
    const body = JSON.stringify({ resource });
    const out = await this.call('POST', '/v1/tokens', body, `token for ${JSON.stringify(resource)}`, timeoutMs);
    if (out === null || typeof out !== 'object' || Array.isArray(out)) {
      throw new TokenServiceError(`fencegate: token for ${JSON.stringify(resource)}: the answer is not a JSON object`, { kind: 'bad_answer' });
    }
    return readToken(resource, out, out);
  }

  // nextBatch asks for a token for each waiting call in one request, for
  // as long as the latest of their time limits; a call whose own limit
  // passes first is refused then by its timer (its token, if it comes, is
  // unused, which is harmless: tokens are not dense).
  async nextBatch(batch) {
    const latest = Math.max(...batch.map((w) => w.deadline));
    try {
      const body = JSON.stringify({ resources: batch.map((w) => w.resource) });
      const out = await this.call('POST', '/v1/tokens', body, `tokens for ${batch.length} resources`, Math.max(latest - now(), 0));
      const items = out && typeof out === 'object' && !Array.isArray(out) ? out.tokens : undefined;
      if (!Array.isArray(items) || items.length !== batch.length) {
        throw new TokenServiceError(`fencegate: tokens for ${batch.length} resources: the answer does not hold ${batch.length} tokens`, { kind: 'bad_answer' });
      }
      const got = batch.map((w, i) => readToken(w.resource, items[i], out));
      batch.forEach((w, i) => w.resolve(got[i]));
    } catch (e) {
      if (e instanceof TokenRequestError) {
        // Every name was checked before it joined, so the service refused
        // the batch as a whole (a limit the client does not know), not any
        // one call: each call is asked for alone, and only a refusal of its
        // own request reaches it.
        for (const w of batch) {
          if (w.settled) continue;
          try {
            w.resolve(await this.nextOne(w.resource, Math.max(w.deadline - now(), 0)));
          } catch (e2) {
            w.reject(e2);
          }
        }
        return;
      }
      for (const w of batch) w.reject(e);
    }
  }

  async call(method, path, body, what, timeoutMs) {
    const limit = timeoutMs ?? this.maxWaitMs;
    const deadline = now() + Math.max(limit, 0);
    const last = new Map();
    let roundKinds = new Map();
    let rounds = 0;
    let deadSince = null; // when the first of the rounds of dead ends in a row ended
    let n = 0;
    let hops = 0;
    for (;;) {
      let srv = this.servers[this.preferred];
      try {
        const { out, leader } = await this.try(srv, method, path, body, deadline);
        if (this.followLeader && leader[0]) srv = this.follow(leader[0], leader[1]) || srv;
        this.prefer(srv);
        return out;
      } catch (e) {
        if (!(e instanceof Attempt)) throw e;
        const a = e;
        // An attempt cut short by the call's deadline says less than the
        // node's earlier answer ("no quorum"): keep that one.
        if (!last.has(srv) || !(a.kind === 'unreachable' && now() >= deadline)) last.set(srv, a);
        if (!a.retryable) throw this.error(what, a, last);
        roundKinds.set(srv, a.kind);
        if (a.kind === 'not_leader' && a.leaderApi && hops < 2) {
          const leaderURL = this.follow(a.leaderApi, a.leaderId);
          if (leaderURL && leaderURL !== srv && now() < deadline) {
            hops++;
            this.prefer(leaderURL);
            continue;
          }
        }
        hops = 0;
        this.rotate(srv);
        n++;
        const k = this.servers.length;
        if (n % k === 0) {
          if (roundKinds.size >= k && [...roundKinds.values()].every((x) => DEAD_ENDS.has(x))) {
            deadSince ??= now();
            const answers = [...last.values()];
            const eofOnly = answers.some((x) => x.eof) && answers.every((x) => x.kind !== 'bad_answer' || x.eof);
            if (!eofOnly || now() - deadSince >= EOF_GRACE_MS) throw this.error(what, a, last, { deadEnd: true });
          } else {
            deadSince = null;
          }
          roundKinds = new Map();
          rounds++;
          if (!(await this.sleep(rounds, deadline))) throw this.error(what, a, last, { timedOut: true });
        } else if (now() >= deadline) {
          throw this.error(what, a, last, { timedOut: true });
        }
      }
    }
  }

  // follow returns the URL of the leader a node named, if the client may
  // follow it: a URL the caller gave as is; over TLS another URL only with
  // the leader's ID, pinned to it; never from https down to http.
  follow(url, leaderId) {
    let u;
    try {
      u = normalizeURL(url);
    } catch {
      return null;
    }
    if (this.given.includes(u)) return u;
    if (u.startsWith('https://')) {
      if (!leaderId) return null;
      this.pinned.set(u, leaderId);
      return u;
    }
    if (this.httpsOnly) return null;
    return u;
  }

  error(what, a, last, { deadEnd = false, timedOut = false } = {}) {
    const nodeErrors = Object.fromEntries([...last].map(([u, e]) => [u, `${e.kind}: ${e.message}`]));
    const detail = Object.entries(nodeErrors)
      .map(([u, m]) => `${u}: ${m}`)
      .join('; ');
    if (a.kind === 'bad_request') {
      return new TokenRequestError(`fencegate: ${what}: the token service refused the request: ${a.message}`, { kind: a.kind, nodeErrors });
    }
    const fixes = [];
    for (const e of last.values()) {
      const f = e.fix || (DEAD_ENDS.has(e.kind) ? FIX_URL : '');
      if (f && !fixes.includes(f)) fixes.push(f);
    }
    const todo = fixes.length ? `; ${fixes.join('; ')}` : '';
    if (a.kind === 'auth') return new TokenAuthError(`fencegate: ${what}: authentication failed: ${detail}${todo}`, { kind: a.kind, nodeErrors });
    if (deadEnd) return new TokenUnavailableError(`fencegate: ${what}: no node serves the token API: ${detail}${todo}`, { kind: a.kind, nodeErrors });
    if (timedOut) {
      return new TokenUnavailableError(`fencegate: ${what}: no token within the call's time; the nodes answered: ${detail}`, {
        kind: 'timeout',
        nodeErrors,
      });
    }
    return new TokenServiceError(`fencegate: ${what}: ${detail}`, { kind: a.kind, nodeErrors });
  }

  // try makes one request to one node and resolves to the decoded JSON and
  // the leader the node names ([apiURL, id]).
  try(srv, method, path, body, deadline) {
    const left = deadline - now();
    if (left <= 0) return Promise.reject(new Attempt('timeout', "the call's time ran out before this attempt", { retryable: true }));
    const timeout = Math.min(this.attemptTimeoutMs, left);
    const u = new URL(srv);
    if (this.auth && u.protocol === 'http:' && !isLoopback(u.hostname)) {
      return Promise.reject(new Attempt('insecure', `refusing to send the bearer credential over plain HTTP to ${srv}; use https://`, { retryable: false }));
    }
    const headers = { Accept: 'application/json' };
    if (body != null) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = Buffer.byteLength(body);
    }
    if (this.auth) headers.Authorization = this.auth;
    const secure = u.protocol === 'https:';
    const mod = secure ? https : http;
    const want = this.pinned.get(srv);
    return new Promise((resolve, reject) => {
      let settled = false;
      let timer = null;
      const fail = (a) => {
        clearTimeout(timer);
        if (!settled) {
          settled = true;
          reject(a);
        }
      };
      const req = mod.request(
        {
          method,
          host: u.hostname.replace(/^\[(.*)\]$/, '$1'),
          port: u.port,
          path,
          headers,
          agent: secure ? this.httpsAgent : this.httpAgent,
          ...(secure ? this.tlsOptions : {}),
        },
        (res) => {
          if (want !== undefined) {
            const cert = res.socket && typeof res.socket.getPeerCertificate === 'function' ? res.socket.getPeerCertificate() : null;
            const cn = cert && cert.subject ? cert.subject.CN : undefined;
            if (!cert || cn !== want) {
              res.destroy();
              req.destroy();
              return fail(new Attempt('unavailable', `followed as leader ${want}, it answered as ${JSON.stringify(cn ?? '?')}; refused`, { retryable: true }));
            }
          }
          const chunks = [];
          let size = 0;
          res.on('data', (d) => {
            size += d.length;
            if (size <= 1 << 20) chunks.push(d);
          });
          res.on('error', (e) => fail(classify(e, req.reusedSocket)));
          res.on('end', () => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            const data = Buffer.concat(chunks).toString('utf8');
            const ctype = String(res.headers['content-type'] || '').split(';')[0].trim();
            const leader = [String(res.headers[LEADER_HEADER] || ''), String(res.headers[LEADER_ID_HEADER] || '')];
            if (res.statusCode === 200) {
              try {
                resolve({ out: parseJSON(data), leader });
              } catch {
                reject(new Attempt('bad_answer', `HTTP 200 ${ctype || 'answer'} that is not the token API's JSON`, { retryable: true, fix: FIX_URL }));
              }
              return;
            }
            reject(decodeError(res.statusCode, data, ctype));
          });
        },
      );
      timer = setTimeout(() => {
        req.destroy();
        fail(new Attempt('unreachable', 'no answer within the attempt timeout', { retryable: true }));
      }, timeout);
      req.on('error', (e) => {
        clearTimeout(timer);
        fail(classify(e, req.reusedSocket));
      });
      req.end(body ?? undefined);
    });
  }

  prefer(srv) {
    if (!this.servers.includes(srv)) this.servers.push(srv);
    this.preferred = this.servers.indexOf(srv);
  }

  rotate(srv) {
    if (this.servers[this.preferred] === srv) this.preferred = (this.preferred + 1) % this.servers.length;
  }

  async sleep(rounds, deadline) {
    const [base, top] = this.backoffMs;
    const d = Math.random() * Math.min(top, base * 2 ** Math.min(rounds, 16));
    const left = deadline - now();
    if (left <= 0) return false;
    await new Promise((r) => setTimeout(r, Math.min(d, left)));
    return now() < deadline;
  }
}

// classify names what went wrong with one request, in distinct words.
// reused says whether the request went out on a kept-alive connection,
// which the server may have closed meanwhile: no sign of what listens.
function classify(e, reused = false) {
  const code = String((e && e.code) || '');
  const msg = String((e && e.message) || e);
  const tlsTrust = [
    'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
    'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
    'SELF_SIGNED_CERT_IN_CHAIN',
    'DEPTH_ZERO_SELF_SIGNED_CERT',
    'CERT_HAS_EXPIRED',
    'CERT_NOT_YET_VALID',
    'ERR_TLS_CERT_ALTNAME_INVALID',
    'CERT_SIGNATURE_FAILURE',
  ];
  if (tlsTrust.includes(code)) return new Attempt('auth', `TLS: the server's certificate is not trusted (${code})`, { retryable: false, fix: FIX_CA });
  if (/ALERT|HANDSHAKE/i.test(code) && /CERTIFICATE|HANDSHAKE/i.test(code + msg)) {
    return new Attempt('auth', `TLS handshake failed (${code}); check tls.cert/tls.key and tls.ca`, { retryable: false });
  }
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || /wrong version number|packet length too long/i.test(msg)) {
    return new Attempt('bad_answer', 'TLS: the node does not speak TLS', { retryable: true, fix: FIX_PLAIN });
  }
  if (code === 'ECONNREFUSED') return new Attempt('refused', 'connection refused (nothing listens there)', { retryable: true });
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return new Attempt('unknown_host', `unknown host (${code})`, { retryable: true });
  if (code.startsWith('HPE_')) return new Attempt('bad_answer', `not an HTTP answer (${code})`, { retryable: true, fix: FIX_URL });
  if (code === 'ECONNRESET' && !reused) return new Attempt('bad_answer', EOF_REASON, { retryable: true, fix: FIX_URL, eof: true });
  if (code === 'ETIMEDOUT') return new Attempt('unreachable', 'no answer within the attempt timeout', { retryable: true });
  return new Attempt('unreachable', `${code || 'error'}: ${msg.split('\n')[0]}`, { retryable: true });
}

// decodeError reads an error answer: {"error": "...", "code": "...",
// "leader_api": "..."}. Anything else is described by its status and type,
// never by its body (an HTML page does not belong in an error message).
function decodeError(status, data, ctype = '') {
  let doc = null;
  try {
    doc = JSON.parse(data);
  } catch {
    doc = null;
  }
  const obj = doc !== null && typeof doc === 'object' && !Array.isArray(doc) ? doc : null;
  const code = obj && typeof obj.code === 'string' ? obj.code : '';
  const msg = obj && typeof obj.error === 'string' ? obj.error : '';
  if (!code) {
    const answered = `HTTP ${status} ${ctype}`.trimEnd();
    // A proxy in front of a node that restarts: try again.
    if ([502, 503, 504].includes(status)) return new Attempt('unavailable', `${answered}, not the token API's JSON`, { retryable: true });
    if (status === 400 && data.includes('HTTPS server')) {
      return new Attempt('bad_answer', `${answered} (a plain-HTTP request to a TLS port)`, { retryable: true, fix: FIX_HTTPS });
    }
    if (status === 401 || status === 403) return new Attempt('auth', `${answered}: credentials refused`, { retryable: false });
    const more = status === 404 ? ' (not a token node, or one too old for this request)' : '';
    return new Attempt('bad_answer', `${answered}, not the token API's JSON${more}`, { retryable: true, fix: FIX_URL });
  }
  if (status === 401 || status === 403) return new Attempt('auth', `HTTP ${status}: ${msg || 'credentials refused'}`, { retryable: false });
  const text = msg.trim() || `HTTP ${status}`;
  if (code === 'bad_request') return new Attempt('bad_request', text, { retryable: false });
  if (['unauthenticated', 'unauthorized', 'forbidden', 'permission_denied'].includes(code)) return new Attempt('auth', text, { retryable: false });
  const kind = ['not_leader', 'no_quorum', 'unavailable'].includes(code) ? code : 'internal';
  return new Attempt(kind, text, { retryable: true, leaderApi: String(obj.leader_api || ''), leaderId: String(obj.leader_id || '') });
}

const CRED_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const MIN_SECRET = 32;

// readCredentials reads a client credential file (one line NAME SECRET;
// blank lines and # comments ignored) and returns the Authorization header
// value. Errors never show the secret.
export function readCredentials(path) {
  let text;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new TypeError(`fencegate: credentials file ${path}: cannot read it (${e.code || 'error'})`);
  }
  let found = null;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line || line.startsWith('#')) continue;
    const where = `fencegate: credentials file ${path} line ${i + 1}`;
    if (found) throw new TypeError(`${where}: a client's file holds one credential; this is a second one`);
    const fields = line.split(/\s+/);
    if (fields.length === 3 && fields[2].startsWith('sha256:')) {
      throw new TypeError(`${where}: this is a node's line (NAME ROLES sha256:HASH); a client's file holds NAME SECRET`);
    }
    if (fields.length !== 2) throw new TypeError(`${where}: want NAME SECRET`);
    const [name, secret] = fields;
    if (!CRED_NAME.test(name)) throw new TypeError(`${where}: the name: use letters, digits, '.', '_' or '-' (at most 64)`);
    if (secret.length < MIN_SECRET || secret.includes(':')) {
      throw new TypeError(`${where}: the secret is too short or malformed; make one with fencegate token credential`);
    }
    found = [name, secret];
  }
  if (!found) throw new TypeError(`fencegate: credentials file ${path} holds no credential; want one line NAME SECRET`);
  return `Bearer ${found[0]}:${found[1]}`;
}
