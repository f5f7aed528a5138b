// The shared resource-name table (tokenapi/testdata/resource-names.json):
// every case through checkResource, the token client and a lock client with
// and without token servers. A refused name throws before any network
// write (every server address refuses connections, so an attempt to reach
// one would fail otherwise); a valid name is granted.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { LockClient, TokenClient } from '../index.js';
import { checkResource } from '../lib/tokens.js';
import { Stack, closedPort, test } from './support.js';

const TABLE = new URL('../../../tokenapi/testdata/resource-names.json', import.meta.url);

// asString decodes bytes as a JS program holds them: each byte of an
// invalid UTF-8 sequence becomes a lone surrogate U+DC80..U+DCFF (as
// Python's surrogateescape), since a JS string cannot hold the byte itself.
function asString(buf) {
  let out = '';
  let i = 0;
  const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  while (i < buf.length) {
    let done = false;
    for (let n = 1; n <= 4 && i + n <= buf.length; n++) {
      try {
        out += strict.decode(buf.subarray(i, i + n));
        i += n;
        done = true;
        break;
      } catch {
        // try a longer sequence
      }
    }
    if (!done) {
      out += String.fromCharCode(0xdc00 + buf[i]);
      i++;
    }
  }
  return out;
}

export function tableCases() {
  const { cases } = JSON.parse(readFileSync(TABLE, 'utf8'));
  return cases.map((c) => ({ name: asString(Buffer.from(c.hex, 'hex')), valid: c.valid, why: c.why }));
}

test('the shared resource-name table, in every entry point', async (t) => {
  const s = new Stack(t);
  const cases = tableCases();
  assert.ok(cases.length >= 30, `${cases.length} cases`);
  const dead = `127.0.0.1:${await closedPort()}`;
  const tc = new TokenClient([`http://${dead}`]);
  const offline = new LockClient({ redisUrls: [`redis://${dead}`] });
  const offlineTok = new LockClient({ redisUrls: [`redis://${dead}`], tokenServers: [`http://${dead}`] });
  s.closers.push(() => tc.close(), () => offline.close(), () => offlineTok.close());
  const live = s.locks({ tokenServers: null });
  let valid = 0;
  let refused = 0;
  for (const c of cases) {
    if (c.valid) {
      assert.doesNotThrow(() => checkResource(c.name), c.why);
      const lock = await live.tryAcquire(c.name);
      await lock.release();
      valid++;
      continue;
    }
    assert.throws(() => checkResource(c.name), c.why);
    await assert.rejects(tc.next(c.name, { timeoutMs: 1000 }), (e) => e instanceof TypeError || e instanceof RangeError, c.why);
    for (const l of [offline, offlineTok]) {
      await assert.rejects(l.acquire(c.name, { timeoutMs: 1000 }), (e) => e instanceof TypeError || e instanceof RangeError, c.why);
      await assert.rejects(l.tryAcquire(c.name), (e) => e instanceof TypeError || e instanceof RangeError, c.why);
    }
    refused++;
  }
  t.diagnostic(`resource-name table: ${cases.length} cases, ${valid} valid, ${refused} refused`);
  console.log(`resource-name table: ${cases.length} cases, ${valid} valid, ${refused} refused`);
});
