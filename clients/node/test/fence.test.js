// Fenced transactions: a write under the lock commits; a stale holder is
// refused (FG001); an unfenced write is refused (FG002); every fencegate
// SQLSTATE has its error; 40001, 40P01 and FG004 are retried; a COMMIT whose
// answer never came is reported as unknown.

import assert from 'node:assert/strict';
import {
  BadProofError,
  CommitUnknownError,
  FenceError,
  FenceMisuseError,
  FenceTimeoutError,
  PrivilegedRoleError,
  ProtectedDDLError,
  SchemaInvalidError,
  SerializationError,
  StaleTokenError,
  TransactionAbortedError,
  UnfencedWriteError,
  transaction,
} from '../index.js';
import { Stack, commitCutter, env, test, unique, waitUntil } from './support.js';

const raise = (code) => `DO $$ BEGIN RAISE EXCEPTION 'fencegate: raised by the test' USING ERRCODE = '${code}', HINT = 'the hint'; END $$`;

test('a fenced write commits; through a pool too', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const acct = await s.newAccount(locks, 100);
  const lock = await locks.acquire('account:' + acct);
  const out = await lock.transaction(await s.connect(), async (c) => {
    await c.query('UPDATE accounts SET balance = balance - 10 WHERE id = $1', [acct]);
    return 'done';
  });
  assert.equal(out, 'done');
  await lock.transaction(s.pool(), (c) => c.query('UPDATE accounts SET balance = balance - 5 WHERE id = $1', [acct]));
  await lock.release();
  assert.equal(await s.balance(acct), 85);
  const mark = await s.query('SELECT token::text AS t FROM fencegate.marks WHERE resource = $1', ['account:' + acct]);
  assert.equal(BigInt(mark[0].t), lock.token);
});

test('a stale holder is refused with StaleTokenError and commits nothing', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ ttlMs: 300 });
  const acct = await s.newAccount(s.locks(), 100);
  const res = 'account:' + acct;
  const old = await locks.acquire(res);
  await waitUntil(() => old.lost, 'the old lock to expire');
  const fresh = await s.locks().acquire(res);
  assert.ok(fresh.token > old.token);
  await fresh.transaction(await s.connect(), (c) => c.query('UPDATE accounts SET balance = balance + 1 WHERE id = $1', [acct]));
  let ran = false;
  await assert.rejects(
    old.transaction(await s.connect(), async (c) => {
      ran = true;
      await c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct]);
    }),
    (e) => {
      assert.ok(e instanceof StaleTokenError && e instanceof FenceError);
      assert.equal(e.code, 'FG001');
      assert.equal(e.sqlstate, 'FG001');
      assert.equal(e.resource, res);
      assert.equal(e.token, old.token);
      assert.equal(e.cause.code, 'FG001');
      return true;
    },
  );
  assert.equal(ran, false, 'the callback ran after a stale fence');
  assert.equal(await s.balance(acct), 101);
  await fresh.release();
});

test('an unfenced write is refused with UnfencedWriteError, also straight to PostgreSQL', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const acct = await s.newAccount(locks, 100);
  for (const dsn of [env('FENCEGATE_TEST_DSN'), env('FENCEGATE_TEST_APP_DIRECT_DSN')]) {
    const c = await s.connect(dsn);
    await assert.rejects(c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct]), (e) => e.code === 'FG002');
  }
  // A fence guards only its own resource.
  const other = await locks.acquire(unique('account:other'));
  await assert.rejects(
    other.transaction(await s.connect(), (c) => c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct])),
    (e) => e instanceof UnfencedWriteError && e.code === 'FG002',
  );
  await other.release();
  assert.equal(await s.balance(acct), 100);
});

test('every fencegate SQLSTATE has its error class', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ txRetries: 0 });
  const want = {
    FG001: StaleTokenError,
    FG002: UnfencedWriteError,
    FG003: FenceMisuseError,
    FG004: FenceTimeoutError,
    FG005: SchemaInvalidError,
    FG006: ProtectedDDLError,
    FG007: PrivilegedRoleError,
    FG008: BadProofError,
  };
  const lock = await locks.acquire(unique('account:codes'));
  const conn = await s.connect();
  for (const [code, Cls] of Object.entries(want)) {
    await assert.rejects(lock.transaction(conn, (c) => c.query(raise(code))), (e) => {
      assert.ok(e instanceof Cls, `${code}: ${e.constructor.name}`);
      assert.equal(e.code, code);
      assert.equal(e.hint, 'the hint');
      assert.equal(e.retryable, code === 'FG004');
      return true;
    });
  }
  await lock.release();
});

test('40001, 40P01 and FG004 run the whole transaction again', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ ttlMs: 10000 });
  const acct = await s.newAccount(locks, 100);
  const lock = await locks.acquire('account:' + acct);
  const conn = await s.connect();
  for (const code of ['40001', '40P01', 'FG004']) {
    let runs = 0;
    await lock.transaction(conn, async (c) => {
      runs++;
      await c.query('UPDATE accounts SET balance = balance + 1 WHERE id = $1', [acct]);
      if (runs < 3) await c.query(raise(code));
    });
    assert.equal(runs, 3, code);
  }
  assert.equal(await s.balance(acct), 103, 'a failed attempt committed');
  let runs = 0;
  await assert.rejects(
    lock.transaction(conn, async (c) => {
      runs++;
      await c.query(raise('40001'));
    }),
    (e) => e instanceof SerializationError && e.code === '40001' && /after 6 attempts/.test(e.message),
  );
  assert.equal(runs, 6);
  await assert.rejects(lock.transaction(conn, (c) => c.query(raise('FG004'))), (e) => e instanceof FenceTimeoutError && /after 6 attempts/.test(e.message));
  // Not retried: a stale token, or any other error.
  runs = 0;
  await assert.rejects(
    lock.transaction(conn, async (c) => {
      runs++;
      await c.query(raise('FG001'));
    }),
    StaleTokenError,
  );
  assert.equal(runs, 1);
  await lock.release();
});

test('an error thrown or caught inside the callback commits nothing', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const acct = await s.newAccount(locks, 100);
  const lock = await locks.acquire('account:' + acct);
  const conn = await s.connect();
  await assert.rejects(
    lock.transaction(conn, async (c) => {
      await c.query('UPDATE accounts SET balance = 1 WHERE id = $1', [acct]);
      throw new Error('the callback failed');
    }),
    /the callback failed/,
  );
  await assert.rejects(
    lock.transaction(conn, async (c) => {
      await c.query('UPDATE accounts SET balance = 2 WHERE id = $1', [acct]);
      await c.query('SELECT 1/0').catch(() => {});
    }),
    TransactionAbortedError,
  );
  // The connection is usable afterwards, and a transaction already open is refused.
  await conn.query('BEGIN');
  await assert.rejects(lock.transaction(conn, async () => {}), FenceMisuseError);
  await conn.query('ROLLBACK');
  await lock.release();
  assert.equal(await s.balance(acct), 100);
});

test('BEGIN and the first fence go as one round trip; a refused fence leaves the session idle', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const acct = await s.newAccount(locks, 100);
  const res = 'account:' + acct;
  const conn = await s.connect();
  let answers = 0;
  const count = () => answers++;
  const old = await locks.acquire(res);
  await old.release();
  const lock = await locks.acquire(res);
  conn.connection.on('readyForQuery', count);
  await lock.transaction(conn, (c) => c.query('UPDATE accounts SET balance = balance + 1 WHERE id = $1', [acct]));
  conn.connection.off('readyForQuery', count);
  // BEGIN with the fence, the UPDATE, COMMIT: three answers, not four.
  assert.equal(answers, 3);
  // A stale fence sent with BEGIN is refused before the callback runs, and
  // the transaction BEGIN opened is rolled back: the next fenced
  // transaction on the same session starts from idle.
  let ran = false;
  await assert.rejects(
    old.transaction(conn, async () => {
      ran = true;
    }),
    (e) => e instanceof StaleTokenError && e.resource === res && e.token === old.token,
  );
  assert.equal(ran, false);
  await lock.transaction(conn, (c) => c.query('UPDATE accounts SET balance = balance + 1 WHERE id = $1', [acct]));
  await lock.release();
  assert.equal(await s.balance(acct), 102);
});

test('a transfer under two locks fences both, in byte order', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const a = await s.newAccount(locks, 100);
  const b = await s.newAccount(locks, 0);
  const la = await locks.acquire('account:' + a);
  const lb = await locks.acquire('account:' + b);
  await transaction(await s.connect(), [lb, la], async (c) => {
    await c.query('UPDATE accounts SET balance = balance - 30 WHERE id = $1', [a]);
    await c.query('UPDATE accounts SET balance = balance + 30 WHERE id = $1', [b]);
  });
  await la.release();
  await lb.release();
  assert.deepEqual([await s.balance(a), await s.balance(b)], [70, 30]);
});

test('a COMMIT whose answer never came is CommitUnknownError; the idempotent redo finds it done', async (t) => {
  const s = new Stack(t);
  const locks = s.locks({ ttlMs: 10000 });
  const acct = await s.newAccount(locks, 100);
  const conn = await s.connect(await commitCutter(s, env('FENCEGATE_TEST_DSN')));
  const req = unique('req');
  const lock = await locks.acquire('account:' + acct);
  const pay = (db) =>
    lock.transaction(db, async (c) => {
      const seen = await c.query('SELECT 1 FROM requests WHERE id = $1', [req]);
      if (seen.rowCount) return 'already done';
      await c.query('INSERT INTO requests (id, account, amount) VALUES ($1, $2, -10)', [req, acct]);
      await c.query('UPDATE accounts SET balance = balance - 10 WHERE id = $1', [acct]);
      return 'done';
    });
  await assert.rejects(pay(conn), (e) => {
    assert.ok(e instanceof CommitUnknownError, e.stack);
    assert.equal(e.resource, 'account:' + acct);
    assert.equal(e.token, lock.token);
    return true;
  });
  await waitUntil(async () => (await s.balance(acct)) === 90, 'the COMMIT to land');
  assert.equal(await pay(await s.connect()), 'already done');
  await lock.release();
  assert.equal(await s.balance(acct), 90);
});

test('a connection lost before COMMIT is a plain error', async (t) => {
  const s = new Stack(t);
  const locks = s.locks();
  const acct = await s.newAccount(locks, 100);
  const conn = await s.connect(await commitCutter(s, env('FENCEGATE_TEST_DSN'), { cutOn: 'UPDATE', forward: false }));
  const lock = await locks.acquire('account:' + acct);
  await assert.rejects(
    lock.transaction(conn, (c) => c.query('UPDATE accounts SET balance = 0 WHERE id = $1', [acct])),
    (e) => !(e instanceof CommitUnknownError) && !(e instanceof FenceError),
  );
  await lock.release();
  assert.equal(await s.balance(acct), 100);
});
