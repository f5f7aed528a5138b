// Kleppmann's paused holder, with a real process stopped by SIGSTOP: it
// takes the lock and reads, is stopped past its TTL, another holder takes
// the lock and charges, and the stopped one wakes up and charges from its
// stale read. Its lease reports the loss the moment it resumes, and
// PostgreSQL refuses its write (StaleTokenError); the account is charged
// once.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Stack, keyPrefix, test, unique, waitUntil } from './support.js';

const holder = fileURLToPath(new URL('./holder.js', import.meta.url));

test('a holder paused past its TTL cannot write', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const acct = await s.newAccount(locks, 100);
  const res = 'account:' + acct;
  const child = spawn(process.execPath, [holder, res, acct, '500'], { stdio: ['pipe', 'pipe', 'inherit'] });
  t.after(() => child.kill('SIGKILL'));
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async () => (await lines.next()).value.split(' ');

  const words = await next();
  assert.equal(words[0], 'acquired', words.join(' '));
  const childToken = BigInt(words[1]);
  assert.equal(Number(words[2]), 100);

  process.kill(child.pid, 'SIGSTOP');
  try {
    const r = s.redis();
    await waitUntil(async () => (await r.get(keyPrefix() + res)) === null, "the stopped holder's lock to expire", 10000);
    const lock = await locks.acquire(res);
    assert.ok(lock.token > childToken);
    await lock.transaction(await s.connect(), async (c) => {
      const bal = Number((await c.query('SELECT balance FROM accounts WHERE id = $1', [acct])).rows[0].balance);
      await c.query('UPDATE accounts SET balance = $1 WHERE id = $2', [bal - 10, acct]);
    });
    await lock.release();
  } finally {
    process.kill(child.pid, 'SIGCONT');
  }
  child.stdin.write('go\n');
  assert.deepEqual(await next(), ['lost', 'true']);
  assert.deepEqual(await next(), ['stale', 'FG001']);
  assert.equal(await exited, 0);
  assert.equal(await s.balance(acct), 90);
  const rows = await s.query('SELECT count(*)::int AS n FROM requests WHERE account = $1', [acct]);
  assert.equal(rows[0].n, 0);
});
