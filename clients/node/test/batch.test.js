// Batches never fail a call for another call's size or name: split by
// encoded bytes under the service's limit, each name checked before it
// joins, and a batch the service refused as a whole asked for call by call.

import assert from 'node:assert/strict';
import http from 'node:http';
import { TokenClient, TokenRequestError } from '../index.js';
import { Stack, test, tokenServers } from './support.js';

test('100 calls with valid 1 KiB names at once all get tokens', async (t) => {
  const s = new Stack(t);
  const tc = new TokenClient(tokenServers());
  s.closers.push(() => tc.close());
  await tc.next('warm-up');
  // A control character is six bytes in JSON: 100 such names are 600 KiB.
  const names = Array.from({ length: 100 }, (_, i) => String(i).padStart(4, '0') + '\x01'.repeat(1020));
  const out = await Promise.allSettled(names.map((n) => tc.next(n)));
  const failed = out.filter((r) => r.status === 'rejected');
  assert.equal(failed.length, 0, failed.length ? `${failed.length} of 100 failed: ${failed[0].reason.message.slice(0, 200)}` : '');
  const tokens = new Set(out.map((r) => r.value.token));
  assert.equal(tokens.size, 100);
});

test('one call with a bad name fails alone; the calls batched with it get tokens', async (t) => {
  const s = new Stack(t);
  const tc = new TokenClient(tokenServers());
  s.closers.push(() => tc.close());
  const first = tc.next('in-flight'); // the others wait behind it, as one batch
  const calls = [];
  for (let i = 0; i < 19; i++) calls.push(tc.next(`valid-${i}`));
  const bad = tc.next('bad\ufffdname');
  calls.push(first);
  await assert.rejects(bad, (e) => e instanceof TypeError && /U\+FFFD/.test(e.message));
  const out = await Promise.allSettled(calls);
  assert.deepEqual(out.filter((r) => r.status === 'rejected').map((r) => r.reason.message), []);
});

test('a batch refused as a whole is asked for call by call; a call refused alone fails alone', async (t) => {
  const s = new Stack(t);
  let n = 0;
  const singles = new Map();
  let release;
  const gate = new Promise((r) => (release = r));
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', async () => {
      const j = JSON.parse(body);
      res.setHeader('Content-Type', 'application/json');
      if (j.resources) {
        res.writeHead(400);
        res.end(JSON.stringify({ error: 'batch too large for this server', code: 'bad_request' }));
        return;
      }
      await gate;
      singles.set(j.resource, (singles.get(j.resource) || 0) + 1);
      if (j.resource === 'refused-alone') {
        res.writeHead(400);
        res.end(JSON.stringify({ error: 'not this one', code: 'bad_request' }));
        return;
      }
      res.end(JSON.stringify({ resource: j.resource, token: ++n }));
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  s.closers.push(() => new Promise((r) => srv.close(r)));
  const tc = new TokenClient([`http://127.0.0.1:${srv.address().port}`]);
  s.closers.push(() => tc.close());
  const names = ['first', ...Array.from({ length: 20 }, (_, i) => `r${i}`), 'refused-alone'];
  const calls = names.map((nm) => tc.next(nm));
  release();
  const out = await Promise.allSettled(calls);
  names.forEach((nm, i) => {
    if (nm === 'refused-alone') assert.ok(out[i].status === 'rejected' && out[i].reason instanceof TokenRequestError, nm);
    else assert.equal(out[i].status, 'fulfilled', `${nm}: ${out[i].reason?.message}`);
    assert.equal(singles.get(nm), 1, `${nm} asked for alone ${singles.get(nm)} times`);
  });
});
