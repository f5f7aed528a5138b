// No proof in statement text: while a signed fence's transaction is open,
// pg_stat_activity shows the fence with placeholders; the proof (a bearer
// credential while its token is current) travels as a bound parameter.

import assert from 'node:assert/strict';
import { Stack, env, test, unique } from './support.js';

test('pg_stat_activity shows no proof during a signed fence', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ tokenServers: env('FENCEGATE_TEST_SIGNED_TOKEN_SERVERS').split(',') });
  const lock = await locks.acquire(unique('bound'));
  assert.ok(lock.proof, 'the signing token service gave no proof');
  let rows;
  await lock.transaction(await s.connect(env('FENCEGATE_TEST_SIGNED_DSN')), async () => {
    rows = await s.query(
      "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%fencegate.fence%'",
      [],
      env('FENCEGATE_TEST_SIGNED_ADMIN_DSN'),
    );
  });
  await lock.release();
  assert.ok(rows.length > 0, 'the fence statement is not in pg_stat_activity');
  for (const r of rows) {
    assert.ok(!r.query.includes(lock.proof) && !r.query.includes(lock.proof.split('.')[1]), `pg_stat_activity shows the proof: ${r.query}`);
  }
  console.log(`pg_stat_activity during a signed fence: ${JSON.stringify(rows.map((r) => r.query))}`);
});
