// The token client gives up within seconds, in one line that says what is
// wrong and what to do, against addresses that are not the token API
// (PostgreSQL's port, a web page, a TLS cluster without its CA), and
// acquire({ timeoutMs }) bounds the whole call, token included, against a
// token server that accepts connections and never answers.

import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { TokenAuthError, TokenClient, TokenUnavailableError } from '../index.js';
import { Stack, env, keyPrefix, test, unique } from './support.js';

async function giveUp(t, url, limitMs, want, ErrorClass = TokenUnavailableError, opts = {}) {
  const c = new TokenClient([url], opts);
  t.after(() => c.close());
  const start = performance.now();
  const err = await c.next('order:42').then(
    () => assert.fail(`a token from ${url}`),
    (e) => e,
  );
  const took = performance.now() - start;
  assert.ok(err instanceof ErrorClass, `${url}: ${err}`);
  assert.ok(took < limitMs, `${url}: gave up after ${Math.round(took)} ms: ${err.message}`);
  assert.ok(!/[\n<]/.test(err.message), `not one line without markup: ${err.message}`);
  for (const w of want) assert.ok(err.message.includes(w), `${JSON.stringify(err.message)} does not say ${JSON.stringify(w)}`);
  return err;
}

test('PostgreSQL\'s port: gives up within seconds', async (t) => {
  const host = new URL(env('FENCEGATE_TEST_ADMIN_DSN')).host;
  for (const url of [`http://${host}`, `https://${host}`]) {
    await giveUp(t, url, 5000, ['closed the connection', 'check the server URLs']);
  }
});

test('a web page: gives up at once, without the page', async (t) => {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(501, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end('<!DOCTYPE HTML>\n<html><body><h1>Error response</h1></body></html>\n');
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => srv.close());
  await giveUp(t, `http://127.0.0.1:${srv.address().port}`, 2000, ["HTTP 501 text/html, not the token API's JSON", 'check the server URLs']);
});

test('a TLS cluster without its CA, or as http://: gives up at once, naming the fix', async (t) => {
  const url = env('FENCEGATE_TEST_TLS_TOKEN_URL');
  await giveUp(t, url, 2000, ['not trusted', 'tls: { ca'], TokenAuthError);
  await giveUp(t, `http://${new URL(url).host}`, 2000, ['plain-HTTP request to a TLS port', 'write https://']);
});

test('acquire({ timeoutMs }) bounds the token wait against a silent token server', async (t) => {
  const conns = [];
  const silent = net.createServer((c) => conns.push(c));
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  t.after(() => {
    for (const c of conns) c.destroy();
    silent.close();
  });
  const s = new Stack(t);
  const locks = s.locks({ tokenServers: [`http://127.0.0.1:${silent.address().port}`] });
  const res = unique('giveup');
  const start = performance.now();
  await assert.rejects(locks.acquire(res, { timeoutMs: 3000 }), TokenUnavailableError);
  const took = performance.now() - start;
  assert.ok(took < 4000, `acquire({ timeoutMs: 3000 }) took ${Math.round(took)} ms against a token server that never answers`);
  assert.equal(await s.redis().get(keyPrefix() + res), null, 'the failed acquire left its lock behind');
});
