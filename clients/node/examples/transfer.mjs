#!/usr/bin/env node
// Move money between two accounts under fencegate locks.
//
// Each account is a resource ("account:ID"). A transfer takes both locks (in
// one order, so two opposite transfers never wait for each other forever),
// then reads and writes in one transaction that starts with both fences. A
// worker whose lock expired while it stalled gets StaleTokenError instead of
// overwriting a newer holder's balances, and nothing of its transaction
// commits. Each transfer carries an id, so a COMMIT whose answer was lost
// can be checked and never applied twice.
//
// Once, as an administrator, in the database `fencegate dev` made (postgres
// straight at 127.0.0.1:5432; dev installed schema fencegate there with the
// grants of its application role fencegate_app): the tables, their
// protection, and the role's table grants. The proxy admits the
// application role and refuses the administrator.
//
//   ADMIN=postgres://postgres@127.0.0.1:5432/fencegate_dev
//   psql $ADMIN -c 'CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)'
//   psql $ADMIN -c 'CREATE TABLE transfers (id text PRIMARY KEY, src text NOT NULL, dst text NOT NULL, cents bigint NOT NULL)'
//   psql $ADMIN -c "INSERT INTO accounts VALUES ('alice', 5000), ('bob', 0)"
//   fencegate protect accounts --resource "'account:' || id" --db $ADMIN
//   fencegate protect transfers --resource "'account:' || src" --db $ADMIN
//   psql $ADMIN -c 'GRANT SELECT, INSERT, UPDATE, DELETE ON accounts, transfers TO fencegate_app'
//
// Then, as the application, through the proxy (Redis, three token nodes and
// the proxy of `fencegate dev`), from clients/node after `npm ci`, with the
// password dev wrote for fencegate_app:
//
//   PGPASSFILE=../../fencegate-data/pgpass node examples/transfer.mjs alice bob 1000

import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { CommitUnknownError, LockClient, StaleTokenError, transaction } from '../index.js';

async function transfer(locks, db, src, dst, cents, transferId) {
  // Take the locks in one order; the transaction fences them in one order too.
  const [first, second] = [src, dst].sort();
  const a = await locks.acquire('account:' + first);
  try {
    const b = await locks.acquire('account:' + second);
    try {
      return await transaction(db, [a, b], async (c) => {
        if ((await c.query('SELECT 1 FROM transfers WHERE id = $1', [transferId])).rowCount) return 'already done';
        const row = await c.query('SELECT balance FROM accounts WHERE id = $1', [src]);
        if (!row.rowCount || BigInt(row.rows[0].balance) < BigInt(cents)) return 'refused: insufficient funds';
        await c.query('UPDATE accounts SET balance = balance - $1 WHERE id = $2', [cents, src]);
        await c.query('UPDATE accounts SET balance = balance + $1 WHERE id = $2', [cents, dst]);
        await c.query('INSERT INTO transfers (id, src, dst, cents) VALUES ($1, $2, $3, $4)', [transferId, src, dst, cents]);
        return 'done';
      });
    } finally {
      await b.release().catch(() => {});
    }
  } finally {
    await a.release().catch(() => {});
  }
}

async function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      db: { type: 'string', default: 'postgresql://fencegate_app@127.0.0.1:6432/fencegate_dev?sslmode=disable' },
      redis: { type: 'string', default: 'redis://127.0.0.1:6379' },
      tokens: { type: 'string', default: 'http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103' },
    },
  });
  if (positionals.length !== 3 || !/^\d+$/.test(positionals[2])) {
    console.error('usage: node examples/transfer.mjs SRC DST CENTS [--db URL] [--redis URL] [--tokens URL,URL,...]');
    process.exit(2);
  }
  const [src, dst, cents] = positionals;
  const locks = new LockClient({ redisUrls: [values.redis], tokenServers: values.tokens.split(','), ttlMs: 10000 });
  const db = new pg.Pool({ connectionString: values.db, max: 2 });
  const transferId = randomUUID();
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        console.log(await transfer(locks, db, src, dst, cents, transferId));
        return;
      } catch (e) {
        if (e instanceof StaleTokenError) {
          // A newer holder wrote while this one stalled: nothing of ours
          // committed. Take the locks again and redo from fresh reads.
          console.error(`stale lock, retrying: ${e.message}`);
          continue;
        }
        if (e instanceof CommitUnknownError) {
          // Maybe committed: the redo under new locks finds the transfer id
          // if it did, and does nothing then.
          console.error(`commit outcome unknown, checking: ${e.message}`);
          continue;
        }
        throw e;
      }
    }
    console.error('gave up after 3 attempts');
    process.exitCode = 1;
  } finally {
    await locks.close();
    await db.end();
  }
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
