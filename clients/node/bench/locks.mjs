#!/usr/bin/env node
// Lock cycles per second (acquire + release, no token) of this client and of
// the npm `redlock` package (a devDependency), at 1 and 16 concurrent
// acquirers, on one and on five Redis servers. Each acquirer locks a
// resource of its own, so what is measured is the client's cost and Redis
// round trips, not contention. It starts its own redis-servers (from PATH,
// no persistence) on free ports and stops them at the end.
//
//   cd clients/node && npm ci && node bench/locks.mjs [--seconds 1] [--rounds 3]
//
// It prints, per configuration, the median over the rounds of cycles/s and
// of the client process's CPU time (user + system) per cycle.

import { spawn } from 'node:child_process';
import net from 'node:net';
import { parseArgs } from 'node:util';
import Redis from 'ioredis';
import Redlock from 'redlock';
import { LockClient } from '../index.js';

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '1' }, rounds: { type: 'string', default: '3' } } });
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);

async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

async function startRedis() {
  const port = await freePort();
  const p = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const c = new Redis({ port, lazyConnect: true, retryStrategy: () => 20, maxRetriesPerRequest: null });
  c.on('error', () => {});
  for (let i = 0; i < 100; i++) {
    try {
      await c.connect();
      await c.ping();
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  c.disconnect();
  return { url: `redis://127.0.0.1:${port}`, port, stop: () => p.kill('SIGKILL') };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// run drives `workers` loops of cycle(i) for `seconds` and returns
// [cycles/s, CPU µs per cycle].
async function run(workers, cycle) {
  const end = performance.now() + seconds * 1000;
  let n = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let i = 0; performance.now() < end; i++) {
        await cycle(`bench:${w}:${i % 64}`);
        n++;
      }
    }),
  );
  const dt = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return [n / dt, (cpu.user + cpu.system) / n];
}

async function main() {
  const servers = [];
  for (let i = 0; i < 5; i++) servers.push(await startRedis());
  try {
    console.log(`${seconds}s per round, ${rounds} rounds; medians`);
    console.log('client     servers  acquirers  cycles/s   CPU µs/cycle');
    for (const k of [1, 5]) {
      const urls = servers.slice(0, k).map((s) => s.url);
      const fg = new LockClient({ redisUrls: urls, ttlMs: 10000, nodeTimeoutMs: 1000, retry: () => null });
      const ios = servers.slice(0, k).map((s) => new Redis({ port: s.port }));
      const rl = new Redlock(ios, { retryCount: 0 });
      const clients = {
        fencegate: async (res) => {
          const l = await fg.acquire(res);
          await l.release();
        },
        redlock: async (res) => {
          const l = await rl.acquire([res], 10000);
          await l.release();
        },
      };
      for (const workers of [1, 16]) {
        for (const [name, cycle] of Object.entries(clients)) {
          await run(workers, cycle); // warm-up round, not counted
          const rates = [];
          const cpus = [];
          for (let r = 0; r < rounds; r++) {
            const [rate, cpu] = await run(workers, cycle);
            rates.push(rate);
            cpus.push(cpu);
          }
          console.log(`${name.padEnd(10)} ${String(k).padStart(7)}  ${String(workers).padStart(9)}  ${median(rates).toFixed(0).padStart(8)}   ${median(cpus).toFixed(1).padStart(12)}`);
        }
      }
      await fg.close();
      for (const c of ios) c.disconnect();
    }
  } finally {
    for (const s of servers) s.stop();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
