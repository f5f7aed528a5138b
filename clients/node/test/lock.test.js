// The lock on one Redis: the key and value on the wire, the TTL, the
// token, release never deleting another holder's key, loss after the TTL,
// refresh, efficiency mode, the resource-name rule and secrets kept out of
// errors.

import assert from 'node:assert/strict';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  DEFAULT_KEY_PREFIX,
  LockClient,
  LockLostError,
  LockReleasedError,
  NoTokenError,
  NotAcquiredError,
  TokenServiceError,
  TokenClient,
} from '../index.js';
import { Stack, closedPort, env, keyPrefix, redisURL, test, tokenServers, unique, waitUntil } from './support.js';

test('a lock is a key with a random value, the TTL and a bigint token', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const r = s.redis();
  const res = unique('lock');
  const lock = await locks.acquire(res);
  assert.equal(lock.resource, res);
  assert.equal(typeof lock.token, 'bigint');
  assert.ok(lock.token > 0n);
  assert.equal(lock.proof, null);
  assert.ok(lock.validUntil instanceof Date);
  assert.ok(lock.validUntil.getTime() > Date.now());
  assert.equal(lock.lost, false);
  const value = await r.get(keyPrefix() + res);
  assert.match(value, /^[0-9a-f]{32}$/);
  const pttl = await r.pttl(keyPrefix() + res);
  assert.ok(pttl > 0 && pttl <= 10000, `pttl ${pttl}`);
  await lock.release();
  assert.equal(await r.get(keyPrefix() + res), null);
  await lock.release(); // idempotent
  await assert.rejects(lock.refresh(), LockReleasedError);
});

test('a held lock keeps others out; tokens grow from holder to holder', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const other = s.locks();
  const res = unique('lock');
  const a = await locks.tryAcquire(res);
  await assert.rejects(other.tryAcquire(res), (e) => {
    assert.ok(e instanceof NotAcquiredError);
    assert.deepEqual(e.taken, other.nodes);
    assert.match(e.message, /held by another client/);
    return true;
  });
  await assert.rejects(other.acquire(res, { timeoutMs: 50 }), NotAcquiredError);
  await a.release();
  const b = await other.acquire(res);
  assert.ok(b.token > a.token);
  await b.release();
});

test('release never deletes the key of a later holder', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ ttlMs: 100 });
  const r = s.redis();
  const res = unique('lock');
  const lock = await locks.acquire(res);
  await waitUntil(() => lock.lost, 'the lock to expire');
  await r.set(keyPrefix() + res, 'someone-else', 'PX', 10000);
  await assert.rejects(lock.release(), LockLostError);
  assert.equal(await r.get(keyPrefix() + res), 'someone-else');
});

test('a lock is lost once its validity passes, and says so', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ ttlMs: 200 });
  const lock = await locks.acquire(unique('lock'));
  const lost = new Promise((resolve) => lock.once('lost', resolve));
  assert.ok((await lost) instanceof LockLostError);
  assert.equal(lock.lost, true);
  assert.equal(lock.held, false);
  await assert.rejects(lock.refresh(), LockLostError);
});

test('refresh extends the key; a key taken by another is a loss', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ ttlMs: 5000 });
  const r = s.redis();
  const res = unique('lock');
  const lock = await locks.acquire(res);
  const before = lock.validUntil.getTime();
  await new Promise((x) => setTimeout(x, 20));
  await lock.refresh();
  assert.ok(lock.validUntil.getTime() > before);
  await r.set(keyPrefix() + res, 'someone-else', 'PX', 10000);
  await assert.rejects(lock.refresh(), LockLostError);
  assert.equal(lock.lost, true);
});

test('autoRefresh keeps a lock past its TTL', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ ttlMs: 1000, autoRefresh: true });
  const lock = await locks.acquire(unique('lock'));
  const until = Date.now() + 2500;
  await waitUntil(() => Date.now() > until, 'two and a half TTLs');
  assert.equal(lock.lost, false);
  await lock.release();
});

test('without token servers the lock has no token and no transaction', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ tokenServers: null });
  assert.equal(locks.fenced, false);
  const lock = await locks.acquire(unique('lock'));
  assert.equal(lock.token, null);
  await assert.rejects(lock.transaction(await s.connect(), async () => {}), NoTokenError);
  await lock.release();
});

test('the default key prefix is fencegate:lock:', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ keyPrefix: undefined });
  assert.equal(DEFAULT_KEY_PREFIX, 'fencegate:lock:');
  const res = unique('nodetest-default');
  const lock = await locks.acquire(res);
  assert.match(await s.redis().get('fencegate:lock:' + res), /^[0-9a-f]{32}$/);
  await lock.release();
});

test('the resource-name rule is checked before anything is sent', async (t) => {
  const s = new Stack(t);
  // Nothing listens on either address: a request would fail differently.
  const port = await closedPort();
  const locks = s.locks({ redisUrls: [`redis://127.0.0.1:${port}`], tokenServers: [`http://127.0.0.1:${port}`] });
  const bad = ['', '   ', 'a\0b', 'x'.repeat(1025), 'é'.repeat(513), 'lone \ud800 surrogate', 42, null];
  for (const res of bad) {
    await assert.rejects(locks.tryAcquire(res), (e) => e instanceof TypeError || e instanceof RangeError, String(res).slice(0, 20));
    await assert.rejects(locks.acquire(res), (e) => e instanceof TypeError || e instanceof RangeError);
  }
  const tokens = new TokenClient([`http://127.0.0.1:${port}`]);
  t.after(() => tokens.close());
  await assert.rejects(tokens.next('a\0b'), TypeError);
  // 1024 bytes is allowed, and multi-byte names are the same lock everywhere.
  const good = s.locks();
  const res = unique('é') + 'x'.repeat(1024 - Buffer.byteLength(unique('é')));
  assert.equal(Buffer.byteLength(res), 1024);
  const lock = await good.acquire(res);
  assert.match(await s.redis().get(keyPrefix() + res), /^[0-9a-f]{32}$/);
  await lock.release();
});

test('no password and no credential appears in an error', async (t) => {
  const s = new Stack(t);
  const authURL = env('FENCEGATE_TEST_REDIS_AUTH_URL');
  const pw = decodeURIComponent(new URL(authURL).password);
  const wrong = new URL(authURL);
  wrong.password = 'not-' + pw;
  const locks = s.locks({ redisUrls: [wrong.toString()] });
  await assert.rejects(locks.tryAcquire(unique('lock')), (e) => {
    assert.ok(e instanceof NotAcquiredError);
    assert.match(e.message, /authentication failed/);
    assert.ok(!e.message.includes(pw), e.message);
    assert.ok(!JSON.stringify(e.nodeErrors).includes(pw));
    return true;
  });
  const ok = s.locks({ redisUrls: [authURL] });
  const lock = await ok.acquire(unique('lock'));
  await lock.release();
  assert.ok(!ok.nodes.join().includes(pw));

  for (const url of [`redis://:${pw}@`, `redis://user:${pw}/x@127.0.0.1`, `rediss://:${pw}@127.0.0.1`]) {
    assert.throws(() => new LockClient({ redisUrls: [url] }), (e) => !e.message.includes(pw), url);
  }
  const dir = mkdtempSync(join(tmpdir(), 'fencegate-node-'));
  const secret = 'S'.repeat(20) + ':' + 'T'.repeat(20);
  const file = join(dir, 'credentials');
  writeFileSync(file, `node-test ${secret}\n`, { mode: 0o600 });
  assert.throws(
    () => new LockClient({ redisUrls: [redisURL()], tokenServers: tokenServers(), credentialsFile: file }),
    (e) => !e.message.includes(secret) && !e.message.includes('S'.repeat(20)) && /secret is too short or malformed/.test(e.message),
  );
});

test('the Redis client fails at once on a master that is down', async (t) => {
  const s = new Stack(t);
  // A node timeout longer than the test: the answer must be the refusal,
  // not "no answer within 60s".
  const locks = s.locks({ redisUrls: [`redis://127.0.0.1:${await closedPort()}`], nodeTimeoutMs: 60000 });
  await assert.rejects(locks.tryAcquire(unique('lock')), (e) => e instanceof NotAcquiredError && /connection refused/.test(e.message));
});

test('TLS to Redis (rediss://)', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ redisUrls: [env('FENCEGATE_TEST_REDIS_TLS_URL')] });
  const lock = await locks.acquire(unique('lock'));
  assert.ok(lock.token > 0n);
  await lock.release();
});

test('a token service that is down fails the acquisition and leaves no key', async (t) => {
  const s = new Stack(t);
  const port = await closedPort();
  const locks = s.locks({ tokenServers: [`http://127.0.0.1:${port}`] });
  const res = unique('lock');
  await assert.rejects(locks.acquire(res), (e) => e instanceof TokenServiceError && e.kind === 'refused');
  assert.equal(await s.redis().get(keyPrefix() + res), null);
});

test('a lock lost between the grant and the token is not handed out', async (t) => {
  const s = new Stack(t);
  const r = s.redis();
  const res = unique('lock');
  // A token source that stalls past the TTL, while another client takes the key.
  const slow = {
    async next() {
      await waitUntil(async () => (await r.get(keyPrefix() + res)) === null, 'the key to expire');
      await r.set(keyPrefix() + res, 'someone-else', 'PX', 10000);
      return { token: 7n, proof: null };
    },
  };
  const locks = s.locks({ tokenServers: null, tokenSource: slow, ttlMs: 100 });
  await assert.rejects(locks.tryAcquire(res), (e) => e instanceof NotAcquiredError && /lost between the grant and the token/.test(e.message));
  assert.equal(await r.get(keyPrefix() + res), 'someone-else');
});
