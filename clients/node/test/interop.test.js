// Go and Node.js contend for the same locks: a Go lockclient (the Go peer,
// driven over HTTP) and this client must see each other's grants, never
// hold one lock together, and fence each other's stale writes.

import assert from 'node:assert/strict';
import { NotAcquiredError, StaleTokenError } from '../index.js';
import { Stack, env, keyPrefix, peer, redlockURLs, test, unique, waitUntil } from './support.js';

const go = (path, body) => peer(path, { prefix: keyPrefix(), ...body });

async function goRelease(res, body = {}) {
  const { status, out } = await go('/release', { resource: res, ...body });
  assert.equal(status, 200, JSON.stringify(out));
}

test('a Go lock keeps Node.js out, and back', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const res = unique('interop');
  let { status, out } = await go('/try', { resource: res });
  assert.equal(status, 200, JSON.stringify(out));
  assert.equal(out.key, keyPrefix() + res);
  assert.match(out.values[0], /^[0-9a-f]{32}$/);
  await assert.rejects(locks.tryAcquire(res), (e) => e instanceof NotAcquiredError && e.taken.join() === locks.nodes.join());
  await goRelease(res);
  const lock = await locks.tryAcquire(res);
  assert.ok(lock.token > BigInt(out.token));
  ({ status, out } = await go('/try', { resource: res }));
  assert.equal(status, 409, JSON.stringify(out));
  assert.equal(out.not_acquired, true);
  await lock.release();
  ({ status, out } = await go('/try', { resource: res }));
  assert.equal(status, 200, JSON.stringify(out));
  await goRelease(res);
});

test('a non-ASCII resource and the default prefix name the same lock in Go and Node.js', async (t) => {
  const s = new Stack(t);
  const res = unique('konto:Zürich/ø 東京');
  const locks = s.locks({ keyPrefix: undefined });
  const { status, out } = await peer('/try', { resource: res });
  assert.equal(status, 200, JSON.stringify(out));
  assert.equal(out.key, 'fencegate:lock:' + res);
  try {
    await assert.rejects(locks.tryAcquire(res), NotAcquiredError);
  } finally {
    assert.equal((await peer('/release', { resource: res })).status, 200);
  }
  await (await locks.tryAcquire(res)).release();
});

test('Redlock: a Go lock on the masters keeps Node.js out', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ redisUrls: redlockURLs() });
  const res = unique('interop-rl');
  let { status, out } = await go('/try', { resource: res, redlock: true });
  assert.equal(status, 200, JSON.stringify(out));
  assert.equal(new Set(out.values).size, 1);
  await assert.rejects(locks.tryAcquire(res), (e) => e instanceof NotAcquiredError && e.taken.length >= 2);
  await goRelease(res, { redlock: true });
  const lock = await locks.acquire(res);
  ({ status, out } = await go('/try', { resource: res, redlock: true }));
  assert.equal(status, 409, JSON.stringify(out));
  await lock.release();
});

async function contend(t, redlock, n = 30) {
  const s = new Stack(t);
  const locks = s.locks(redlock ? { redisUrls: redlockURLs() } : {});
  const ctr = await s.newCounter(s.locks());
  const res = 'counter:' + ctr;
  const inside = env('FENCEGATE_TEST_KEY_PREFIX') + 'inside:' + ctr;
  const r = s.redis();
  const conn = await s.connect();
  const goSide = go('/contend', { resource: res, redlock, n, inside, counter: ctr });
  const mine = [];
  let overlaps = 0;
  for (let i = 0; i < n; i++) {
    const lock = await locks.acquire(res, { timeoutMs: 60000 });
    try {
      if ((await r.incr(inside)) !== 1) overlaps++;
      await lock.transaction(conn, (c) => c.query('UPDATE counters SET n = n + 1 WHERE id = $1', [ctr]));
      await r.decr(inside);
      mine.push(lock.token);
    } finally {
      await lock.release();
    }
    await new Promise((x) => setTimeout(x, 5)); // work between holds, as the Go side does
  }
  const { status, out } = await goSide;
  assert.equal(status, 200, JSON.stringify(out));
  const theirs = out.tokens.map((x) => BigInt(x));
  assert.deepEqual([overlaps, out.overlaps], [0, 0], 'Go and Node.js held the lock at the same time');
  const rows = await s.query('SELECT n::int AS n FROM counters WHERE id = $1', [ctr]);
  assert.equal(rows[0].n, 2 * n);
  const sorted = (a) => [...a].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  assert.deepEqual(mine, sorted(mine));
  assert.deepEqual(theirs, sorted(theirs));
  assert.equal(new Set([...mine, ...theirs].map(String)).size, 2 * n, 'a token was handed out twice');
  // They really contended: each side held the lock between two of the other's holds.
  assert.ok(theirs[0] < mine[mine.length - 1]);
  assert.ok(mine[0] < theirs[theirs.length - 1]);
}

test('a Go holder and a Node.js holder contend for one resource', (t) => contend(t, false));
test('a Go holder and a Node.js holder contend for one resource (Redlock)', (t) => contend(t, true));

test('a stale Go holder is fenced out by a Node.js write', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const acct = await s.newAccount(s.locks(), 100);
  const res = 'account:' + acct;
  let { status, out } = await go('/try', { resource: res, ttl_ms: 300 });
  assert.equal(status, 200, JSON.stringify(out));
  const goToken = BigInt(out.token);
  // The Go holder stalls past its TTL; Node.js takes the lock and writes.
  const lock = await locks.acquire(res, { timeoutMs: 10000 });
  assert.ok(lock.token > goToken);
  await lock.transaction(await s.connect(), (c) => c.query('UPDATE accounts SET balance = balance + 1 WHERE id = $1', [acct]));
  await lock.release();
  ({ status, out } = await go('/write', { resource: res, account: acct, delta: -100 }));
  assert.equal(status, 409, JSON.stringify(out));
  assert.equal(out.stale, true);
  assert.equal(await s.balance(acct), 101);
  await go('/release', { resource: res });
});

test('a stale Node.js holder is fenced out by a Go write', async (t) => {
  const s = new Stack(t);
  const short = s.locks({ ttlMs: 300 });
  const acct = await s.newAccount(s.locks(), 100);
  const res = 'account:' + acct;
  const lock = await short.acquire(res);
  await waitUntil(() => lock.lost, 'the lock to expire');
  let { status, out } = await go('/acquire', { resource: res });
  assert.equal(status, 200, JSON.stringify(out));
  assert.ok(BigInt(out.token) > lock.token);
  ({ status, out } = await go('/write', { resource: res, account: acct, delta: 7 }));
  assert.equal(status, 200, JSON.stringify(out));
  await goRelease(res);
  await assert.rejects(lock.transaction(await s.connect(), (c) => c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct])), StaleTokenError);
  assert.equal(await s.balance(acct), 107);
});
