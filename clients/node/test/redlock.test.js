// Redlock over three independent redis-servers: quorum, cleanup on every
// master after a failed round, dead and slow masters, and masters that
// forget the key caught by the fence.

import assert from 'node:assert/strict';
import { LockLostError, NotAcquiredError, StaleTokenError } from '../index.js';
import { Stack, closedPort, redlockURLs, test, unique } from './support.js';

const PREFIX = 'nodetest:redlock:';

function rl(t, opts = {}) {
  const s = new Stack(t);
  s.rl = (o = {}) => s.locks({ redisUrls: redlockURLs(), keyPrefix: PREFIX, ...opts, ...o });
  s.values = (res) => Promise.all(redlockURLs().map((u) => s.redis(u).get(PREFIX + res)));
  return s;
}

test('Redlock: a quorum, and the same value on every master', async (t) => {
  const s = rl(t);
  const locks = s.rl();
  assert.equal(locks.quorum, 2);
  const res = unique('rl');
  const lock = await locks.acquire(res);
  const vals = await s.values(res);
  assert.equal(new Set(vals).size, 1);
  assert.match(vals[0], /^[0-9a-f]{32}$/);
  await lock.release();
  assert.deepEqual(await s.values(res), [null, null, null]);
});

test('Redlock: one master down still grants', async (t) => {
  const s = rl(t);
  const locks = s.rl({ redisUrls: [...redlockURLs().slice(0, 2), `redis://127.0.0.1:${await closedPort()}`] });
  const lock = await locks.acquire(unique('rl'));
  assert.ok(lock.token > 0n);
  await lock.refresh();
  await lock.release();
});

test('Redlock: two masters down fails at once and leaves nothing', async (t) => {
  const s = rl(t);
  const urls = [redlockURLs()[0], `redis://127.0.0.1:${await closedPort()}`, `redis://127.0.0.1:${await closedPort()}`];
  const locks = s.rl({ redisUrls: urls });
  const res = unique('rl');
  await assert.rejects(locks.tryAcquire(res), (e) => e instanceof NotAcquiredError && e.failed.length === 2 && /connection refused/.test(e.message));
  assert.equal(await s.redis(urls[0]).get(PREFIX + res), null, 'a failed attempt left its key behind');
});

test('Redlock: held on a majority elsewhere, the minority is cleaned up', async (t) => {
  const s = rl(t);
  const locks = s.rl();
  const res = unique('rl');
  for (const u of redlockURLs().slice(0, 2)) await s.redis(u).set(PREFIX + res, 'someone-else', 'PX', 10000);
  await assert.rejects(locks.tryAcquire(res), (e) => e instanceof NotAcquiredError && e.taken.length === 2);
  assert.deepEqual(await s.values(res), ['someone-else', 'someone-else', null]);
});

test('Redlock: a slow master counts as failed', async (t) => {
  const s = rl(t);
  const slow = s.redis(redlockURLs()[0]);
  await slow.call('CLIENT', 'PAUSE', '1500', 'WRITE');
  try {
    const locks = s.rl({ nodeTimeoutMs: 300 });
    const lock = await locks.acquire(unique('rl'));
    // The quorum came from the two fast masters; the validity counts from
    // the start of the confirming extend, less the drift, never from the
    // answer.
    assert.ok(lock.remaining() <= locks.ttlMs * 0.99 - 2, `remaining ${lock.remaining()}`);
    assert.ok(lock.token > 0n);
    await lock.release();
  } finally {
    await slow.call('CLIENT', 'UNPAUSE');
  }
});

test('Redlock: a refresh refused by a majority is a loss; by one master it is not', async (t) => {
  const s = rl(t);
  const locks = s.rl({ ttlMs: 5000 });
  const a = await locks.acquire(unique('rl'));
  await s.redis(redlockURLs()[0]).set(PREFIX + a.resource, 'someone-else', 'PX', 10000);
  await a.refresh();
  assert.equal(a.lost, false);
  await s.redis(redlockURLs()[1]).set(PREFIX + a.resource, 'someone-else', 'PX', 10000);
  await assert.rejects(a.refresh(), LockLostError);
  assert.equal(a.lost, true);
});

test('Redlock: masters that forget the key are caught by the fence', async (t) => {
  // Two masters restart without persistence while A holds the lock: B is
  // granted it too. B's token is larger, so once B has written, A is refused.
  const s = rl(t);
  const locks = s.rl({ ttlMs: 10000 });
  const acct = await s.newAccount(s.locks(), 100);
  const res = 'account:' + acct;
  const a = await locks.acquire(res);
  for (const u of redlockURLs().slice(0, 2)) await s.redis(u).del(PREFIX + res);
  const b = await locks.acquire(res);
  assert.equal(a.lost, false, 'A cannot know');
  assert.ok(b.token > a.token);
  await b.transaction(await s.connect(), (c) => c.query('UPDATE accounts SET balance = balance + 5 WHERE id = $1', [acct]));
  await assert.rejects(a.transaction(await s.connect(), (c) => c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct])), StaleTokenError);
  assert.equal(await s.balance(acct), 105);
  await b.release();
});
