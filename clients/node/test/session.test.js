// A session PostgreSQL ends while the callback of a fenced transaction runs
// (pg_terminate_backend: 57P01; an idle-in-transaction timeout: 25P03),
// straight and through the gate, on a pooled connection and on a Client:
// the transaction rejects with the server's error and the process lives on.

import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { CommitUnknownError, FenceError, PrivilegedRoleError } from '../index.js';
import { Stack, env, test, unique } from './support.js';

const paths = [
  ['through the gate', 'FENCEGATE_TEST_DSN'],
  ['straight to PostgreSQL', 'FENCEGATE_TEST_APP_DIRECT_DSN'],
];

// A pool without an 'error' listener of its own: what a user who copies
// the README has. Any error the pooled client emits while fencegate holds
// it must be handled by fencegate.
function barePool(s, dsn, options = '') {
  const p = new pg.Pool({ connectionString: dsn, max: 2, connectionTimeoutMillis: 15000, options });
  s.closers.push(() => p.end().catch(() => {}));
  return p;
}

for (const [where, dsnVar] of paths) {
  for (const pooled of [true, false]) {
    const kind = pooled ? 'a pool' : 'a Client';
    test(`a backend terminated mid-callback rejects, ${where}, on ${kind}`, async (t) => {
      const s = new Stack(t);
      const locks = s.locks();
      const acct = await s.newAccount(locks, 100);
      let db;
      if (pooled) db = barePool(s, env(dsnVar));
      else {
        db = new pg.Client({ connectionString: env(dsnVar), connectionTimeoutMillis: 15000 });
        await db.connect();
        s.closers.push(() => db.end().catch(() => {}));
      }
      const lock = await locks.acquire('account:' + acct);
      await assert.rejects(
        lock.transaction(db, async (c) => {
          await c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct]);
          // The application role's own backend, as the administrator sees it.
          const { rows } = await c.query('SELECT pg_backend_pid() AS pid');
          await s.query('SELECT pg_terminate_backend($1)', [rows[0].pid]);
          await sleep(300); // the FATAL arrives while the callback waits
          await c.query('SELECT 1');
        }),
        (e) => {
          assert.ok(!(e instanceof CommitUnknownError), e.stack);
          assert.ok(!(e instanceof FenceError), e.stack);
          return true;
        },
      );
      await lock.release();
      assert.equal(await s.balance(acct), 100);
    });
  }
  test(`an idle-in-transaction timeout mid-callback rejects, ${where}`, async (t) => {
    const s = new Stack(t);
    const locks = s.locks();
    const acct = await s.newAccount(locks, 100);
    const db = barePool(s, env(dsnVar), '-c idle_in_transaction_session_timeout=200');
    const lock = await locks.acquire('account:' + acct);
    await assert.rejects(
      lock.transaction(db, async (c) => {
        await c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct]);
        await sleep(800); // the server ends the session with 25P03
        await c.query('SELECT 1');
      }),
      (e) => !(e instanceof CommitUnknownError) && !(e instanceof FenceError),
    );
    await lock.release();
    assert.equal(await s.balance(acct), 100);
  });
}

test('the gate refusing a pooled session is PrivilegedRoleError, not the raw error', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  // The administrator (a superuser) through the gate: refused with FG007
  // when the session starts, which for a pool is inside transaction().
  const gate = new URL(env('FENCEGATE_TEST_DSN'));
  const admin = new URL(env('FENCEGATE_TEST_ADMIN_DSN'));
  gate.username = admin.username;
  gate.password = admin.password;
  const lock = await locks.acquire(unique('account:'));
  await assert.rejects(
    lock.transaction(barePool(s, gate.toString()), () => {}),
    (e) => e instanceof PrivilegedRoleError && e.code === 'FG007' && e.resource === lock.resource,
  );
  await lock.release();
});

for (const [where, dsnVar] of paths) {
  test(`a session ended before COMMIT was sent is a plain failure, ${where}`, async (t) => {
    const s = new Stack(t);
    const locks = s.locks();
    const acct = await s.newAccount(locks, 100);
    const db = barePool(s, env(dsnVar));
    const lock = await locks.acquire('account:' + acct);
    await assert.rejects(
      lock.transaction(db, async (c) => {
        await c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct]);
        const { rows } = await c.query('SELECT pg_backend_pid() AS pid');
        await s.query('SELECT pg_terminate_backend($1)', [rows[0].pid]);
        await sleep(300); // the FATAL arrives; the callback then returns and COMMIT would follow
      }),
      (e) => !(e instanceof CommitUnknownError) && !(e instanceof FenceError),
    );
    await lock.release();
    assert.equal(await s.balance(acct), 100);
  });
}
