// The token service: tokens as bigints without precision loss, TLS with a
// client certificate and a bearer credential, failures in distinct words.

import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { LockClient, TokenAuthError, TokenClient, TokenRequestError, TokenUnavailableError } from '../index.js';
import { Stack, closedPort, env, keyPrefix, redisURL, test, tokenServers, unique } from './support.js';

// serve answers every request with status and body.
async function serve(t, status, body) {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(body);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => srv.close());
  return `http://127.0.0.1:${srv.address().port}`;
}

test('tokens grow, from any node, as bigints', async (t) => {
  const c = new TokenClient(tokenServers());
  t.after(() => c.close());
  let prev = 0n;
  for (let i = 0; i < 5; i++) {
    const tok = await c.next(unique('tok'));
    assert.equal(typeof tok.token, 'bigint');
    assert.ok(tok.token > prev);
    prev = tok.token;
  }
});

test('a token beyond 2^53 keeps every digit', async (t) => {
  const big = '9007199254740993'; // 2^53 + 1: a JS number would round it
  const url = await serve(t, 200, `{"resource":"r","token":${big},"term":3,"index":9,"leader":"n1"}`);
  const c = new TokenClient([url]);
  t.after(() => c.close());
  const tok = await c.next('r');
  assert.equal(tok.token, 9007199254740993n);
  assert.equal(tok.term, 3);
  // And the lock carries it as it came.
  const s = new Stack(t);
  const locks = s.locks({ tokenServers: [url], keyPrefix: keyPrefix() + unique('big') + ':' });
  const lock = await locks.acquire('r');
  assert.equal(lock.token.toString(), big);
  await lock.release();
});

test('answers that are not a token are refused', async (t) => {
  for (const body of ['{"token":0}', '{"token":-5}', '{"token":"12"}', '{"token":9223372036854775808}', '{"token":1.5}', '[]', '{"resource":"other","token":5}']) {
    const url = await serve(t, 200, body);
    const c = new TokenClient([url], { maxWaitMs: 2000 });
    t.after(() => c.close());
    await assert.rejects(c.next('r'), (e) => e.kind === 'bad_answer', body);
  }
  const bad = await serve(t, 400, '{"error":"resource too long","code":"bad_request"}');
  const c = new TokenClient([bad]);
  t.after(() => c.close());
  await assert.rejects(c.next('r'), TokenRequestError);
});

test('every node refusing the connection fails at once', async (t) => {
  // A call bound longer than the test: kind "timeout" would mean it retried.
  const c = new TokenClient([`http://127.0.0.1:${await closedPort()}`, `http://127.0.0.1:${await closedPort()}`], { maxWaitMs: 600000 });
  t.after(() => c.close());
  await assert.rejects(c.next('r'), (e) => {
    assert.ok(e instanceof TokenUnavailableError);
    assert.equal(e.kind, 'refused');
    assert.equal(Object.keys(e.nodeErrors).length, 2);
    return true;
  });
});

test('a page that is not the token API is a bad answer', async (t) => {
  const url = await serve(t, 404, '<html>not found</html>');
  const c = new TokenClient([url]);
  t.after(() => c.close());
  await assert.rejects(c.next('r'), (e) => e instanceof TokenUnavailableError && e.kind === 'bad_answer');
});

test('TLS with a client certificate and a bearer credential', async (t) => {
  const s = new Stack(t);
  const tls = { ca: env('FENCEGATE_TEST_TLS_CA'), cert: env('FENCEGATE_TEST_TLS_CERT'), key: env('FENCEGATE_TEST_TLS_KEY') };
  const front = env('FENCEGATE_TEST_TLS_TOKEN_URL');
  const creds = env('FENCEGATE_TEST_CREDENTIALS');
  const secret = readFileSync(creds, 'utf8').split('\n').find((l) => l && !l.startsWith('#')).split(/\s+/)[1];
  const locks = s.locks({ tokenServers: [front], tls, credentialsFile: creds });
  const lock = await locks.acquire(unique('tls'));
  assert.ok(lock.token > 0n);
  await lock.release();
  // Without the credential: refused, not retried, and no secret in the error.
  const noCreds = new TokenClient([front], { tls });
  t.after(() => noCreds.close());
  await assert.rejects(noCreds.next('r'), (e) => e instanceof TokenAuthError && !e.message.includes(secret));
  // Without the client certificate: the TLS handshake fails.
  const noCert = new TokenClient([front], { tls: { ca: tls.ca }, credentialsFile: creds, maxWaitMs: 3000 });
  t.after(() => noCert.close());
  await assert.rejects(noCert.next('r'), (e) => !e.message.includes(secret) && e.kind !== 'timeout');
  // A CA that did not sign the server's certificate.
  const wrongCA = new TokenClient([front], { tls: { ca: env('FENCEGATE_TEST_TLS_SERVER_CERT'), cert: tls.cert, key: tls.key }, credentialsFile: creds });
  t.after(() => wrongCA.close());
  await assert.rejects(wrongCA.next('r'), (e) => e instanceof TokenAuthError && !e.message.includes(secret));
  // Credentials never go in clear text off the loopback.
  assert.throws(() => new LockClient({ redisUrls: [redisURL()], tokenServers: ['http://192.0.2.1:7101'], credentialsFile: creds }), /clear text/);
});

test('calls made while a request is in flight go together in one batch, each token its own and above those before', async (t) => {
  const c = new TokenClient(tokenServers());
  t.after(() => c.close());
  const before = (await c.next(unique('before'))).token;
  const names = Array.from({ length: 64 }, (_, i) => unique(`batch${i}`));
  const got = await Promise.all(names.map((n) => c.next(n)));
  const seen = new Set();
  got.forEach((tok, i) => {
    assert.equal(tok.resource, names[i]);
    assert.ok(tok.token > before, `token ${tok.token} of call ${i} is not above ${before}, taken before it`);
    assert.ok(!seen.has(tok.token), `token ${tok.token} handed out twice`);
    seen.add(tok.token);
  });
});

test('a batch is one request; a call whose own time runs out is refused alone', async (t) => {
  const bodies = [];
  let next = 100;
  const srv = http.createServer((req, res) => {
    let data = '';
    req.on('data', (d) => (data += d));
    req.on('end', () => {
      bodies.push(JSON.parse(data));
      const b = JSON.parse(data);
      setTimeout(() => {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        if (b.resources) {
          res.end(JSON.stringify({ tokens: b.resources.map((r) => ({ resource: r, token: next++ })), term: 2, index: 7, leader: 'n1' }));
        } else {
          res.end(JSON.stringify({ resource: b.resource, token: next++, term: 2, index: 7, leader: 'n1' }));
        }
      }, 300);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => srv.close());
  const c = new TokenClient([`http://127.0.0.1:${srv.address().port}`]);
  t.after(() => c.close());
  const first = c.next('first'); // sent alone, in the single form
  const names = Array.from({ length: 20 }, (_, i) => `r${i}`);
  const batch = names.map((n) => c.next(n)); // wait for the first, then go together
  const hurried = c.next('hurried', { timeoutMs: 100 });
  const started = Date.now();
  await assert.rejects(hurried, (e) => e instanceof TokenUnavailableError && e.kind === 'timeout' && /"hurried"/.test(e.message));
  assert.ok(Date.now() - started < 290, 'the hurried call waited for the others');
  assert.equal((await first).token, 100n);
  const toks = await Promise.all(batch);
  assert.deepEqual(
    toks.map((x) => x.resource),
    names,
  );
  assert.deepEqual(
    toks.map((x) => x.token),
    names.map((_, i) => BigInt(101 + i)),
  );
  assert.equal(bodies.length, 2, `requests: ${JSON.stringify(bodies)}`);
  assert.deepEqual(bodies[0], { resource: 'first' });
  assert.deepEqual(bodies[1], { resources: names }); // the hurried call gave up before the batch left
});

test('a batch answer that does not hold a token per call refuses every call', async (t) => {
  let n = 0;
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      n++;
      setTimeout(() => {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(n === 1 ? '{"resource":"a","token":5}' : '{"tokens":[{"resource":"b","token":6}]}');
      }, 100);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => srv.close());
  const c = new TokenClient([`http://127.0.0.1:${srv.address().port}`]);
  t.after(() => c.close());
  const a = c.next('a');
  const rest = [c.next('b'), c.next('c')];
  assert.equal((await a).token, 5n);
  for (const p of rest) await assert.rejects(p, (e) => e.kind === 'bad_answer' && /does not hold 2 tokens/.test(e.message));
});
