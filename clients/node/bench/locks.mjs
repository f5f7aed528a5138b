#!/usr/bin/env node
// Lock cycles per second of this client against the npm `redlock` package
// (a devDependency), and the full fenced cycle straight to PostgreSQL and
// through the fencegate gate. Run it with `make bench-node` (or
// `FENCEGATE_NODE_BENCH=1 go test -run '^TestNodeBench$' -v ./clients/node/`):
// the Go test starts the stack (five redis-servers, a 3-node token cluster,
// a database with a protected table behind the gate) and names it in the
// FENCEGATE_BENCH_* variables.
//
// What is measured, in this one process, against the same Redis servers:
//   - lock cycle: acquire + release, uncontended (each acquirer locks
//     resources of its own, 64 in turn, so every acquire finds the key
//     absent): this client as an efficiency lock (no tokenServers) and with
//     tokens (the token cluster), and redlock; over the first Redis and over
//     all five (Redlock); at 1 and 16 concurrent acquirers.
//   - fenced cycle: acquire (with a token, one Redis) + one fenced
//     transaction (BEGIN; fence; UPDATE of the acquirer's own row of the
//     protected table counters; COMMIT) + release, with a pg.Pool straight
//     to PostgreSQL and one through the gate.
// Each configuration runs one warm-up round, then --rounds rounds of
// --seconds; the clients of one configuration take turns round by round, so
// a change of load on the machine falls on all of them. It prints the
// median (and the range) of cycles/s and the median CPU time of this
// process (user + system, process.cpuUsage()) per cycle. --profile FILE
// writes a CPU profile of the whole run (for Chrome DevTools) to FILE.

import { readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import os from 'node:os';
import { parseArgs } from 'node:util';
import Redis from 'ioredis';
import pg from 'pg';
import Redlock from 'redlock';
import { LockClient, noRetry } from '../index.js';

const { values } = parseArgs({
  options: { seconds: { type: 'string', default: '3' }, rounds: { type: 'string', default: '5' }, warmup: { type: 'string', default: '1' }, profile: { type: 'string' } },
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
// returns { rate: cycles/s, cpu: CPU µs per cycle }.
async function run(workers, secs, cycle) {
  const end = performance.now() + secs * 1000;
  let n = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let i = 0; performance.now() < end; i++) {
        await cycle(w, i);
        n++;
      }
    }),
  );
  const dt = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { rate: n / dt, cpu: (cpu.user + cpu.system) / n };
}

// compare runs the clients of one configuration in turn, round by round,
// and returns each one's median rate, rate range and median CPU per cycle.
async function compare(workers, clients) {
  const names = Object.keys(clients);
  const res = Object.fromEntries(names.map((n) => [n, { rates: [], cpus: [] }]));
  for (const n of names) await run(workers, warmup, clients[n]);
  for (let r = 0; r < rounds; r++) {
    for (const n of names) {
      const { rate, cpu } = await run(workers, seconds, clients[n]);
      res[n].rates.push(rate);
      res[n].cpus.push(cpu);
    }
  }
  return Object.fromEntries(
    names.map((n) => [n, { rate: median(res[n].rates), min: Math.min(...res[n].rates), max: Math.max(...res[n].rates), cpu: median(res[n].cpus) }]),
  );
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

async function fencedCycles() {
  console.log('\nFenced cycle (acquire with a token on one Redis + BEGIN, fence, UPDATE of a protected row, COMMIT + release), cycles/s: median (min–max); CPU µs per cycle of the Node.js process');
  row(['acquirers', 'straight to PostgreSQL', 'through the gate', 'gate / direct', 'CPU µs/cycle direct / gate']);
  row(Array(5).fill('---'));
  const locks = new LockClient({ redisUrls: redisURLs.slice(0, 1), tokenServers, ttlMs: 10000, nodeTimeoutMs: 1000, retry: noRetry() });
  const pools = Object.fromEntries(Object.entries(dsns).map(([k, dsn]) => [k, new pg.Pool({ connectionString: dsn, max: 16 })]));
  // Each acquirer's row, inserted under its own lock (the table is protected:
  // an unfenced INSERT is refused).
  const id = (w) => `bench-${w}`;
  for (let w = 0; w < 16; w++) {
    const l = await locks.acquire(`counter:${id(w)}`);
    await l.transaction(pools.direct, (c) => c.query('INSERT INTO counters (id) VALUES ($1) ON CONFLICT (id) DO NOTHING', [id(w)]));
    await l.release();
  }
  const cycle = (pool) => async (w) => {
    const l = await locks.acquire(`counter:${id(w)}`);
    try {
      await l.transaction(pool, (c) => c.query('UPDATE counters SET n = n + 1 WHERE id = $1', [id(w)]));
    } finally {
      await l.release();
    }
  };
  for (const workers of [1, 16]) {
    const m = await compare(workers, { direct: cycle(pools.direct), gate: cycle(pools.gate) });
    row([workers, cell(m.direct), cell(m.gate), `${(m.gate.rate / m.direct.rate).toFixed(2)}x`, `${m.direct.cpu.toFixed(0)} / ${m.gate.cpu.toFixed(0)}`]);
  }
  await locks.close();
  for (const p of Object.values(pools)) await p.end();
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
  await lockCycles();
  await fencedCycles();
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
