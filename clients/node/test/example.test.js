// examples/transfer.mjs runs against the stack as a user would run it.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Stack, env, redisURL, test, tokenServers } from './support.js';

const script = fileURLToPath(new URL('../examples/transfer.mjs', import.meta.url));

function runTransfer(src, dst, cents) {
  const args = [script, src, dst, String(cents), '--db', env('FENCEGATE_TEST_DSN'), '--redis', redisURL(), '--tokens', tokenServers().join(',')];
  return new Promise((resolve, reject) => {
    execFile(process.execPath, args, { timeout: 120000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout.trim())));
  });
}

test('examples/transfer.mjs', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const a = await s.newAccount(locks, 100);
  const b = await s.newAccount(locks, 0);
  assert.equal(await runTransfer(a, b, 30), 'done');
  assert.deepEqual([await s.balance(a), await s.balance(b)], [70, 30]);
  assert.equal(await runTransfer(a, b, 500), 'refused: insufficient funds');
  const rows = await s.query('SELECT count(*)::int AS n FROM transfers WHERE src = $1', [a]);
  assert.equal(rows[0].n, 1);
});
