// What the tests share: the endpoints of the stack the Go test started
// (environment variables), and helpers that create and clean up what a test
// uses.
//
// Run the suite through `go test ./clients/node/`: it starts the stack and
// sets the variables. Run alone, every test fails with a line naming the
// variable that is missing (never skips).

import net from 'node:net';
import nodeTest from 'node:test';
import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import pg from 'pg';
import { LockClient, fixedRetry } from '../index.js';

// TEST_TIMEOUT_MS bounds each test (the Go test that runs the suite sets
// it): a test that hangs fails under its own name, and the rest of its file
// still runs.
export const TEST_TIMEOUT_MS = Number(process.env.FENCEGATE_NODE_TEST_TIMEOUT_MS) || 60000;

// test is node:test's test with the time limit above.
export function test(name, opts, fn) {
  if (typeof opts === 'function') [opts, fn] = [{}, opts];
  return nodeTest(name, { timeout: TEST_TIMEOUT_MS, ...opts }, fn);
}

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the Node.js tests with \`go test ./clients/node/\`, which starts the stack`);
  return v;
}

export const redisURL = () => env('FENCEGATE_TEST_REDIS_URL');
export const redlockURLs = () => env('FENCEGATE_TEST_REDLOCK_URLS').split(',');
export const tokenServers = () => env('FENCEGATE_TEST_TOKEN_SERVERS').split(',');
// The lock key prefix of this run, under the Go test's key prefix on the
// shared Redis (the Go test deletes every key under it at the end).
export const keyPrefix = () => env('FENCEGATE_TEST_KEY_PREFIX') + 'lock:';

export function unique(name) {
  return `${name}-${randomBytes(6).toString('hex')}`;
}

// closedPort returns a loopback port that refuses connections and stays
// so: a port below 1024 where nothing listens now. A port that was merely
// free a moment ago can be handed to any listener that binds port 0 next,
// anywhere on the machine, and a test expecting a refusal then waits for
// an answer that never comes; nothing in the tests binds a port below 1024
// (the kernel never hands them out for port 0). Successive calls return
// distinct ports; the Python and Go tests pick theirs the same way.
let closedNext = 0;
export async function closedPort() {
  for (let i = 0; i < 1023; i++) {
    const port = (closedNext++ % 1023) + 1;
    const refused = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1');
      c.setTimeout(1000, () => {
        c.destroy();
        resolve(false);
      });
      c.once('connect', () => {
        c.destroy();
        resolve(false);
      });
      c.once('error', (e) => resolve(e.code === 'ECONNREFUSED'));
    });
    if (refused) return port;
  }
  throw new Error('no port below 1024 refuses connections on 127.0.0.1');
}

export async function waitUntil(cond, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

// bounded waits for p, or ms milliseconds, whichever comes first.
function bounded(p, ms) {
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(resolve, ms);
    timer.unref();
  });
  return Promise.race([Promise.resolve(p).catch(() => {}), late]).finally(() => clearTimeout(timer));
}

// Stack collects what a test opens and closes it at the end (t.after).
export class Stack {
  constructor(t) {
    this.closers = [];
    t.after(async () => {
      // Each closer gets a few seconds: pg's end() on a connection that
      // broke under it may never settle, and a hook that never ends would
      // hold the whole file.
      for (const c of this.closers.reverse()) await bounded(c(), 5000);
    });
  }

  locks(opts = {}) {
    const c = new LockClient({
      redisUrls: [redisURL()],
      tokenServers: tokenServers(),
      ttlMs: 10000,
      keyPrefix: keyPrefix(),
      nodeTimeoutMs: 1000,
      retry: fixedRetry(5),
      ...opts,
    });
    this.closers.push(() => c.close());
    return c;
  }

  redis(url = redisURL()) {
    const u = new URL(url);
    const r = new Redis({ host: u.hostname, port: Number(u.port), lazyConnect: false, maxRetriesPerRequest: 1 });
    r.on('error', () => {});
    this.closers.push(() => r.disconnect());
    return r;
  }

  async connect(dsn = env('FENCEGATE_TEST_DSN')) {
    const c = new pg.Client({ connectionString: dsn, connectionTimeoutMillis: 15000 });
    c.on('error', () => {});
    await c.connect();
    this.closers.push(() => c.end().catch(() => {}));
    return c;
  }

  pool(dsn = env('FENCEGATE_TEST_DSN')) {
    const p = new pg.Pool({ connectionString: dsn, max: 4, connectionTimeoutMillis: 15000 });
    p.on('error', () => {});
    this.closers.push(() => p.end().catch(() => {}));
    return p;
  }

  // query runs one read on a fresh administrator connection.
  async query(sql, args = [], dsn = env('FENCEGATE_TEST_ADMIN_DSN')) {
    const c = new pg.Client({ connectionString: dsn, connectionTimeoutMillis: 15000 });
    await c.connect();
    try {
      return (await c.query(sql, args)).rows;
    } finally {
      await c.end();
    }
  }

  async balance(account) {
    const rows = await this.query('SELECT balance::text AS b FROM accounts WHERE id = $1', [account]);
    if (rows.length !== 1) throw new Error(`account ${account} not found`);
    return Number(rows[0].b);
  }

  // newAccount inserts an account in a transaction fenced with its own lock.
  async newAccount(locks, balance = 100) {
    const acct = unique('acct');
    const conn = await this.connect();
    const lock = await locks.acquire('account:' + acct);
    try {
      await lock.transaction(conn, (c) => c.query('INSERT INTO accounts (id, balance) VALUES ($1, $2)', [acct, balance]));
    } finally {
      await lock.release();
    }
    return acct;
  }

  async newCounter(locks) {
    const id = unique('ctr');
    const conn = await this.connect();
    const lock = await locks.acquire('counter:' + id);
    try {
      await lock.transaction(conn, (c) => c.query('INSERT INTO counters (id, n) VALUES ($1, 0)', [id]));
    } finally {
      await lock.release();
    }
    return id;
  }
}

// peer POSTs to the Go peer (a Go lockclient driven by the tests).
export async function peer(path, body) {
  const res = await fetch(env('FENCEGATE_TEST_GO_PEER') + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body, (_, v) => (typeof v === 'bigint' ? Number(v) : v)),
  });
  return { status: res.status, out: await res.json() };
}

// CommitCutter is a TCP relay in front of the database that passes
// everything until the client sends a query (simple, or the Parse of an
// extended one) containing cutOn; with
// forward it forwards that query, swallows the server's answer and closes
// the client's connection (the transaction commits and the client cannot
// know); without, it cuts before forwarding it.
export async function commitCutter(stack, dsn, { cutOn = 'COMMIT', forward = true } = {}) {
  const u = new URL(dsn);
  const [upHost, upPort] = [u.hostname, Number(u.port || 5432)];
  const server = net.createServer((c) => {
    const s = net.connect(upPort, upHost);
    let cut = false;
    const shut = () => {
      c.destroy();
      s.destroy();
    };
    c.on('data', (d) => {
      if (cut) return;
      if ((d[0] === 0x51 /* Q */ || d[0] === 0x50) /* P */ && d.includes(cutOn)) {
        cut = true;
        if (forward) {
          s.write(d);
          c.destroy();
          s.once('data', () => s.destroy()); // the server answered: it committed
          setTimeout(() => s.destroy(), 5000).unref();
        } else shut();
        return;
      }
      s.write(d);
    });
    s.on('data', (d) => {
      if (!cut) c.write(d);
    });
    c.on('error', shut);
    s.on('error', shut);
    c.on('close', () => !cut && s.destroy());
    s.on('close', () => !cut && c.destroy());
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  stack.closers.push(() => {
    server.close();
  });
  u.host = `127.0.0.1:${server.address().port}`;
  return u.toString();
}
