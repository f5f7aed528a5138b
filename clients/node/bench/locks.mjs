#!/usr/bin/env node
// Lock cycles per second of this client against the npm `redlock` package
// (a devDependency), and the whole critical section, fenced against
// unfenced. Run it with `make bench-node` (the same as
// `go test -run '^$' -bench '^BenchmarkNodeVsRedlock$' -benchtime 1x -v ./clients/node/`):
// the Go benchmark starts the stack (five redis-servers, a 3-node token
// cluster, a database with a protected table and its unprotected twin
// behind the gate) and names it in the FENCEGATE_BENCH_* variables.
//
// What is measured, in this one process, against the same Redis servers:
//   - lock cycle: acquire + release, uncontended (each acquirer locks
//     resources of its own, 64 in turn, so every acquire finds the key
//     absent): this client as an efficiency lock (no tokenServers) and with
//     tokens (the token cluster), and redlock; over the first Redis and over
//     all five (Redlock); at 1 and 16 concurrent acquirers.
//   - critical section: redlock, then BEGIN; UPDATE of the acquirer's own
//     row of the unprotected twin counters_plain; COMMIT; release, against
//     this client's acquire with a token, lock.transaction() (BEGIN; fence;
//     the same UPDATE of the protected table counters; COMMIT) and release,
//     with a pg.Pool straight to PostgreSQL and one through the gate; over
//     one Redis and five; at 1 and 16 acquirers.
// Each configuration runs one warm-up round, then --rounds rounds of
// --seconds; the clients of one configuration take turns round by round
// (every other round in reverse order), so a change of load on the machine
// falls on all of them. It prints the median (and the range) of cycles/s,
// the median of the rounds' p50 latencies, the median CPU time of this
// process (user + system, process.cpuUsage()) per cycle, and the median
// (and range) of the per-round ratio unfenced / fenced; then the median time
// of each step of both cycles at one acquirer. --only locks|cycles|breakdown
// runs one part (cycles includes the steps). --profile FILE writes a CPU
// profile of the whole run (for Chrome DevTools) to FILE.

import { readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import Redis from 'ioredis';
import pg from 'pg';
import Redlock from 'redlock';
import { LockClient, noRetry } from '../index.js';

const { values } = parseArgs({
  options: { seconds: { type: 'string', default: '3' }, rounds: { type: 'string', default: '5' }, warmup: { type: 'string', default: '1' }, only: { type: 'string' }, profile: { type: 'string' } },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const warmup = Number(values.warmup);

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the benchmark with \`make bench-node\`, which starts the stack`);
  return v;
}
const redisURLs = env('FENCEGATE_BENCH_REDIS_URLS').split(',');
const tokenServers = env('FENCEGATE_BENCH_TOKEN_SERVERS').split(',');
const dsns = { direct: env('FENCEGATE_BENCH_DSN_DIRECT'), gate: env('FENCEGATE_BENCH_DSN_GATE') };

const version = (pkg) => JSON.parse(readFileSync(new URL(`../node_modules/${pkg}/package.json`, import.meta.url))).version;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const load = () => os.loadavg().map((x) => x.toFixed(2)).join(' ');

// run drives `workers` loops of cycle(worker, i) for `secs` seconds and
// returns { rate: cycles/s, cpu: CPU µs per cycle, p50: ms per cycle }.
async function run(workers, secs, cycle) {
  const end = performance.now() + secs * 1000;
  const lat = [];
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let i = 0, t = performance.now(); t < end; i++) {
        await cycle(w, i);
        const t1 = performance.now();
        lat.push(t1 - t);
        t = t1;
      }
    }),
  );
  const dt = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const n = lat.length;
  return { rate: n / dt, cpu: (cpu.user + cpu.system) / n, p50: median(lat) };
}

// compare runs the clients of one configuration in turn, round by round
// (in reverse order every other round, so that none always follows the
// same one), and returns each one's median rate, rate range, median p50
// and median CPU per cycle; with clients unfenced and direct, also the
// median and range of the per-round ratio unfenced / direct.
async function compare(workers, clients, pause = 0) {
  const names = Object.keys(clients);
  const res = Object.fromEntries(names.map((n) => [n, { rates: [], cpus: [], p50s: [] }]));
  for (const n of names) {
    if (pause) await sleep(pause);
    await run(workers, warmup, clients[n]);
  }
  const ratios = [];
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? names : [...names].reverse();
    for (const n of order) {
      // Let the idle connections of the side before close (the pools' idle
      // timeout), so that two sides never hold PostgreSQL slots at once.
      if (pause) await sleep(pause);
      const { rate, cpu, p50 } = await run(workers, seconds, clients[n]);
      res[n].rates.push(rate);
      res[n].cpus.push(cpu);
      res[n].p50s.push(p50);
    }
    if (clients.unfenced && clients.direct) ratios.push(res.unfenced.rates[r] / res.direct.rates[r]);
  }
  const out = Object.fromEntries(
    names.map((n) => [n, { rate: median(res[n].rates), min: Math.min(...res[n].rates), max: Math.max(...res[n].rates), cpu: median(res[n].cpus), p50: median(res[n].p50s) }]),
  );
  if (ratios.length) out.ratio = { direct: median(ratios), directMin: Math.min(...ratios), directMax: Math.max(...ratios) };
  return out;
}

const fmt = (x) => Math.round(x).toLocaleString('en-US');
const row = (cells) => console.log(`| ${cells.join(' | ')} |`);
const cell = (m) => `${fmt(m.rate)} (${fmt(m.min)}–${fmt(m.max)})`;

async function lockCycles() {
  console.log('\nLock cycle (acquire + release, uncontended), cycles/s: median (min–max) of the rounds; CPU µs per cycle of the Node.js process');
  row(['Redis', 'acquirers', 'fencegate efficiency', 'fencegate + tokens', 'redlock', 'efficiency / redlock', 'tokens / redlock', 'CPU µs/cycle eff / tokens / redlock']);
  row(Array(8).fill('---'));
  for (const k of [1, redisURLs.length]) {
    const urls = redisURLs.slice(0, k);
    const opts = { redisUrls: urls, ttlMs: 10000, nodeTimeoutMs: 1000, retry: noRetry() };
    const eff = new LockClient(opts);
    const tok = new LockClient({ ...opts, tokenServers });
    const ios = urls.map((u) => new Redis(u));
    const rl = new Redlock(ios, { retryCount: 0 });
    const res = (w, i) => `bench:${w}:${i % 64}`;
    const clients = {
      eff: async (w, i) => {
        const l = await eff.acquire(res(w, i));
        await l.release();
      },
      tok: async (w, i) => {
        const l = await tok.acquire(res(w, i));
        await l.release();
      },
      redlock: async (w, i) => {
        const l = await rl.acquire([res(w, i)], 10000);
        await l.release();
      },
    };
    for (const workers of [1, 16]) {
      const m = await compare(workers, clients);
      row([k === 1 ? '1' : `${k} masters (Redlock)`, workers, cell(m.eff), cell(m.tok), cell(m.redlock),
        `${(m.eff.rate / m.redlock.rate).toFixed(2)}x`, `${(m.tok.rate / m.redlock.rate).toFixed(2)}x`,
        `${m.eff.cpu.toFixed(0)} / ${m.tok.cpu.toFixed(0)} / ${m.redlock.cpu.toFixed(0)}`]);
    }
    await eff.close();
    await tok.close();
    await rl.quit().catch(() => {});
    for (const c of ios) c.disconnect();
  }
}

// cycles compares the whole critical section a user runs around one write,
// fenced against unfenced, per acquirer on a row (and a resource) of its
// own:
//   - unfenced: redlock.acquire, then BEGIN; UPDATE of the row of the
//     unprotected twin table counters_plain; COMMIT on a pooled connection,
//     then release: what users of redlock run today;
//   - fenced: acquire with a token, lock.transaction() (BEGIN; fence; the
//     same UPDATE of the protected table counters; COMMIT), release; straight
//     to PostgreSQL and through the gate.
// All three run in the same rounds, taking turns.
async function cycles() {
  console.log('\nCritical section (lock, [token,] BEGIN, [fence,] UPDATE of one row, COMMIT, release), cycles/s: median (min–max) of the rounds; p50 ms; CPU µs per cycle of the Node.js process');
  row(['Redis', 'acquirers', 'unfenced: redlock + UPDATE (p50)', 'fenced, direct (p50)', 'fenced, through the gate (p50)', 'unfenced / fenced', 'gate / direct', 'CPU µs/cycle unfenced / fenced / gate']);
  row(Array(8).fill('---'));
  // Idle connections close after 300 ms, so that the pool whose turn it is
  // not holds none: PostgreSQL's slots are shared with whatever else runs on
  // the server.
  const pools = Object.fromEntries(Object.entries(dsns).map(([k, dsn]) => [k, new pg.Pool({ connectionString: dsn, max: 16, idleTimeoutMillis: 300 })]));
  // An idle connection the server ends (it restarted, an operator ended the
  // backend) leaves the pool, which opens another; without a listener pg
  // would end the process.
  for (const [k, p] of Object.entries(pools)) p.on('error', (e) => console.error(`pool ${k}: idle connection ended: ${e.message}`));
  const id = (w) => `bench-${w}`;
  for (const k of [1, redisURLs.length]) {
    const urls = redisURLs.slice(0, k);
    const locks = new LockClient({ redisUrls: urls, tokenServers, ttlMs: 10000, nodeTimeoutMs: 1000, retry: noRetry() });
    const ios = urls.map((u) => new Redis(u));
    const rl = new Redlock(ios, { retryCount: 0 });
    // Each acquirer's rows: the protected one inserted under its own lock
    // (an unfenced INSERT is refused), the twin's plainly.
    for (let w = 0; w < 16; w++) {
      const l = await locks.acquire(`counter:${id(w)}`);
      await l.transaction(pools.direct, (c) => c.query('INSERT INTO counters (id) VALUES ($1) ON CONFLICT (id) DO NOTHING', [id(w)]));
      await l.release();
      await pools.direct.query('INSERT INTO counters_plain (id) VALUES ($1) ON CONFLICT (id) DO NOTHING', [id(w)]);
    }
    const fenced = (pool) => async (w) => {
      const l = await locks.acquire(`counter:${id(w)}`);
      try {
        await l.transaction(pool, (c) => c.query('UPDATE counters SET n = n + 1 WHERE id = $1', [id(w)]));
      } finally {
        await l.release();
      }
    };
    const unfenced = async (w) => {
      const l = await rl.acquire([`counter:${id(w)}`], 10000);
      try {
        const c = await pools.direct.connect();
        try {
          await c.query('BEGIN');
          await c.query('UPDATE counters_plain SET n = n + 1 WHERE id = $1', [id(w)]);
          await c.query('COMMIT');
        } catch (e) {
          await c.query('ROLLBACK').catch(() => {});
          throw e;
        } finally {
          c.release();
        }
      } finally {
        await l.release();
      }
    };
    for (const workers of [1, 16]) {
      const m = await compare(workers, { unfenced, direct: fenced(pools.direct), gate: fenced(pools.gate) }, 500);
      const p50 = (x) => `${x.p50.toFixed(2)}`;
      row([k === 1 ? '1' : `${k} masters (Redlock)`, workers,
        `${cell(m.unfenced)} (${p50(m.unfenced)})`, `${cell(m.direct)} (${p50(m.direct)})`, `${cell(m.gate)} (${p50(m.gate)})`,
        `${m.ratio.direct.toFixed(2)}x (${m.ratio.directMin.toFixed(2)}–${m.ratio.directMax.toFixed(2)})`,
        `${(m.gate.rate / m.direct.rate).toFixed(2)}x`,
        `${m.unfenced.cpu.toFixed(0)} / ${m.direct.cpu.toFixed(0)} / ${m.gate.cpu.toFixed(0)}`]);
    }
    await locks.close();
    await rl.quit().catch(() => {});
    for (const c of ios) c.disconnect();
  }
  for (const p of Object.values(pools)) await p.end();
}

// breakdown times each step of both cycles at one acquirer on one Redis,
// cycle after cycle for --seconds, and prints the median of each step: where
// the fenced cycle's extra time goes. It wraps the lock client's grant,
// token and confirm steps and the queries of one pg.Client, so it measures
// the steps as the client runs them, not separate calls.
async function breakdown() {
  const client = new pg.Client({ connectionString: dsns.direct });
  await client.connect();
  const locks = new LockClient({ redisUrls: redisURLs.slice(0, 1), tokenServers, ttlMs: 10000, nodeTimeoutMs: 1000, retry: noRetry() });
  const io = new Redis(redisURLs[0]);
  const rl = new Redlock([io], { retryCount: 0 });
  const steps = {};
  const add = (k, ms) => (steps[k] ||= []).push(ms);
  const timed = async (k, f) => {
    const t = performance.now();
    try {
      return await f();
    } finally {
      add(k, performance.now() - t);
    }
  };
  for (const m of ['_grant', '_nextToken', '_extend']) {
    const orig = locks[m].bind(locks);
    locks[m] = (...a) => timed(`fenced: ${m.slice(1)}`, () => orig(...a));
  }
  let side = 'fenced';
  const query = client.query.bind(client);
  client.query = (...a) => {
    if (typeof a[0].submit === 'function') {
      // BEGIN and the fence in one round trip: pg returns the query
      // itself, whose done settles with the answer.
      const q = query(...a);
      timed(`${side}: BEGIN + fence`, () => a[0].done).catch(() => {});
      return q;
    }
    const text = typeof a[0] === 'string' ? a[0] : a[0].text;
    const word = /fencegate\.fence/.test(text) ? 'fence' : text.split(' ')[0];
    return timed(`${side}: ${word}`, () => query(...a));
  };
  // The rows, when no earlier part inserted them.
  const l0 = await locks.acquire('counter:bench-0');
  await l0.transaction(client, (c) => c.query("INSERT INTO counters (id) VALUES ('bench-0') ON CONFLICT (id) DO NOTHING"));
  await l0.release();
  await client.query("INSERT INTO counters_plain (id) VALUES ('bench-0') ON CONFLICT (id) DO NOTHING");
  for (const k of Object.keys(steps)) delete steps[k];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    side = 'unfenced';
    const rlock = await timed('unfenced: lock', () => rl.acquire(['counter:bench-0'], 10000));
    await timed('unfenced: transaction', async () => {
      await client.query('BEGIN');
      await client.query('UPDATE counters_plain SET n = n + 1 WHERE id = $1', ['bench-0']);
      await client.query('COMMIT');
    });
    await timed('unfenced: release', () => rlock.release());
    side = 'fenced';
    const l = await timed('fenced: acquire', () => locks.acquire('counter:bench-0'));
    await timed('fenced: transaction', () => l.transaction(client, (c) => c.query('UPDATE counters SET n = n + 1 WHERE id = $1', ['bench-0'])));
    await timed('fenced: release', () => l.release());
  }
  console.log(`\nSteps of one cycle at 1 acquirer on one Redis, straight to PostgreSQL: median ms over ${steps['fenced: acquire'].length} cycles of each`);
  row(['step', 'median ms']);
  row(['---', '---']);
  for (const k of Object.keys(steps).sort()) row([k, median(steps[k]).toFixed(3)]);
  await locks.close();
  await rl.quit().catch(() => {});
  io.disconnect();
  await client.end();
}

async function main() {
  console.log(`node ${process.version}, ioredis ${version('ioredis')}, pg ${version('pg')}, redlock ${version('redlock')}; ${os.cpus().length} CPUs`);
  console.log(`${rounds} rounds × ${seconds} s per client and configuration (after a ${warmup} s warm-up); ${redisURLs.length} redis-servers, ${tokenServers.length} token nodes`);
  console.log(`load average at start: ${load()}`);
  let prof = null;
  if (values.profile) {
    prof = new Session();
    prof.connect();
    await prof.post('Profiler.enable');
    await prof.post('Profiler.start');
  }
  if (!values.only || values.only === 'locks') await lockCycles();
  if (values.only !== 'locks' && values.only !== 'breakdown') await cycles();
  if (values.only !== 'locks') await breakdown();
  if (prof) {
    const { profile } = await prof.post('Profiler.stop');
    writeFileSync(values.profile, JSON.stringify(profile));
    console.log(`CPU profile written to ${values.profile}`);
  }
  console.log(`\nload average at end: ${load()}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
