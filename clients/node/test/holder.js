// A lock holder in a process of its own, for paused.test.js: it takes the
// lock, reads the balance in a fenced transaction, waits for a line on stdin
// (the test stops it with SIGSTOP meanwhile), then charges from what it
// read.
//
// Usage: node holder.js RESOURCE ACCOUNT TTL_MS

import { createInterface } from 'node:readline';
import pg from 'pg';
import { LockClient, StaleTokenError } from '../index.js';
import { env, keyPrefix, redisURL, tokenServers } from './support.js';

const [resource, account, ttl] = process.argv.slice(2);
const locks = new LockClient({ redisUrls: [redisURL()], tokenServers: tokenServers(), ttlMs: Number(ttl), keyPrefix: keyPrefix(), nodeTimeoutMs: 1000 });
const conn = new pg.Client({ connectionString: env('FENCEGATE_TEST_DSN') });
await conn.connect();
const lock = await locks.acquire(resource);
const balance = await lock.transaction(conn, async (c) => Number((await c.query('SELECT balance FROM accounts WHERE id = $1', [account])).rows[0].balance));
console.log('acquired', lock.token.toString(), balance);
const lines = createInterface({ input: process.stdin });
await new Promise((resolve) => lines.once('line', resolve));
console.log('lost', lock.lost);
try {
  await lock.transaction(conn, async (c) => {
    await c.query('INSERT INTO requests (id, account, amount) VALUES ($1, $2, -10)', [`holder-${lock.token}`, account]);
    await c.query('UPDATE accounts SET balance = $1 WHERE id = $2', [balance - 10, account]);
  });
  console.log('committed');
} catch (e) {
  if (!(e instanceof StaleTokenError)) throw e;
  console.log('stale', e.code);
}
lines.close();
await conn.end();
await locks.close();
