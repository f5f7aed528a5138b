// Effects: the current holder records one in its fenced transaction; a stale
// holder, a transaction without the fence and a rollback record none.

import assert from 'node:assert/strict';
import { StaleTokenError, UnfencedWriteError, recordEffect } from '../index.js';
import { Stack, test, unique, waitUntil } from './support.js';

test('an effect is recorded only under a standing fence', async (t) => {
  const s = new Stack(t);
  const res = unique('effect');
  const old = await s.locks({ ttlMs: 300 }).acquire(res);
  await waitUntil(() => old.lost, 'the old lock to expire');
  const fresh = await s.locks().acquire(res);
  const ids = await fresh.transaction(await s.connect(), async (c) => [
    await recordEffect(c, fresh, 'payments', { amount: 10 }),
    await recordEffect(c, fresh, 'payments', Buffer.from('{"amount": 11}')),
  ]);
  assert.ok(ids[1] > ids[0]);
  let ran = false;
  await assert.rejects(
    old.transaction(await s.connect(), async (c) => {
      ran = true;
      await recordEffect(c, old, 'payments', { amount: 99 });
    }),
    (e) => e instanceof StaleTokenError,
  );
  assert.equal(ran, false);
  const c = await s.connect();
  await c.query('BEGIN');
  await assert.rejects(recordEffect(c, fresh, 'payments', { amount: 98 }), (e) => e instanceof UnfencedWriteError);
  await c.query('ROLLBACK');
  await assert.rejects(
    fresh.transaction(await s.connect(), async (cl) => {
      await recordEffect(cl, fresh, 'payments', { amount: 97 });
      throw new Error('changed my mind');
    }),
    /changed my mind/,
  );
  await fresh.release();
  const rows = await s.query('SELECT token::text AS t, payload::text AS p FROM fencegate.effects WHERE resource = $1 ORDER BY id', [res]);
  assert.deepEqual(
    rows.map((r) => [BigInt(r.t), JSON.parse(r.p)]),
    [
      [fresh.token, { amount: 10 }],
      [fresh.token, { amount: 11 }],
    ],
  );
});
