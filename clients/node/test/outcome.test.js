// What a fenced transaction reports when the link breaks around COMMIT,
// straight to PostgreSQL and between the gate and PostgreSQL (the Go test
// puts a cutter there, armed through FENCEGATE_TEST_CUT_CONTROL): cut
// before COMMIT was sent, a plain failure and nothing committed; after
// COMMIT reached the server, CommitUnknownError and it committed (through
// the gate the client reads the gate's FATAL 08006, not PostgreSQL's
// answer); after the answer, success.

import assert from 'node:assert/strict';
import { CommitUnknownError, FenceError } from '../index.js';
import { Stack, env, test } from './support.js';

async function control(path) {
  const res = await fetch(env('FENCEGATE_TEST_CUT_CONTROL') + path, { method: 'POST' });
  if (res.status >= 300) throw new Error(`cut control ${path}: ${res.status} ${await res.text()}`);
}

for (const [where, dsnVar] of [
  ['straight', 'FENCEGATE_TEST_CUT_DIRECT_DSN'],
  ['through the gate', 'FENCEGATE_TEST_CUT_GATE_DSN'],
]) {
  for (const point of ['before', 'after-server', 'after-answer']) {
    test(`commit outcome, ${where}, link cut ${point}`, async (t) => {
      const s = new Stack(t);
      const locks = s.locks();
      const acct = await s.newAccount(locks, 100);
      const conn = await s.connect(env(dsnVar));
      const lock = await locks.acquire('account:' + acct);
      await control(`/arm?word=${point === 'before' ? 'UPDATE%20accounts' : 'COMMIT'}&point=${point}`);
      let err = null;
      try {
        await lock.transaction(conn, (c) => c.query('UPDATE accounts SET balance = balance - 10 WHERE id = $1', [acct]));
      } catch (e) {
        err = e;
      }
      await control('/fired');
      await lock.release();
      const balance = await s.balance(acct);
      const got = `error ${err && err.constructor.name}: ${err && err.message}; balance ${balance}`;
      if (point === 'before') {
        assert.ok(err && !(err instanceof CommitUnknownError) && !(err instanceof FenceError), got);
        assert.equal(balance, 100, got);
      } else if (point === 'after-server') {
        assert.ok(err instanceof CommitUnknownError, got);
        assert.equal(balance, 90, got);
      } else {
        assert.equal(err, null, got);
        assert.equal(balance, 90, got);
      }
    });
  }
}
