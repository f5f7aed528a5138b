// Signed tokens: a lock keeps the proof the token service returns and passes
// it to the fence; a database that requires signed tokens accepts that
// write, refuses a forged proof (BadProofError, FG008) and a fence without
// proof (FenceMisuseError, FG003), and advances nothing when it refuses.

import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { BadProofError, FenceMisuseError, TokenClient } from '../index.js';
import { Stack, env, test, unique } from './support.js';

// expectedProof is the proof as docs/protocol.md ("Proofs") defines it,
// computed from the key file the token service and the database were given.
function expectedProof(resource, token) {
  const line = readFileSync(env('FENCEGATE_TEST_SIGNING_KEYS'), 'utf8')
    .split('\n')
    .find((l) => l.trim() && !l.startsWith('#'));
  const [keyId, keyHex] = line.trim().split(/\s+/);
  const u32 = (n) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return b;
  };
  const cid = Buffer.from(env('FENCEGATE_TEST_SIGNING_CLUSTER_ID'));
  const res = Buffer.from(resource);
  const tok = Buffer.alloc(8);
  tok.writeBigInt64BE(token);
  const msg = Buffer.concat([Buffer.from('fencegate-proof-v1'), u32(cid.length), cid, u32(res.length), res, tok]);
  return keyId + '.' + createHmac('sha256', Buffer.from(keyHex, 'hex')).update(msg).digest('hex');
}

// forge changes the proof's last hex digit: well formed, never valid.
const forge = (p) => p.slice(0, -1) + (p.endsWith('0') ? '1' : '0');

function signedStack(t) {
  const s = new Stack(t);
  s.signedLocks = (opts = {}) => s.locks({ tokenServers: env('FENCEGATE_TEST_SIGNED_TOKEN_SERVERS').split(','), ...opts });
  s.mark = async (res) => {
    const rows = await s.query('SELECT token::text AS t FROM fencegate.marks WHERE resource = $1', [res], env('FENCEGATE_TEST_SIGNED_ADMIN_DSN'));
    return rows.length ? BigInt(rows[0].t) : null;
  };
  s.ledger = (id) => s.query('SELECT holder, token::text AS token FROM ledger WHERE id = $1', [id], env('FENCEGATE_TEST_SIGNED_ADMIN_DSN'));
  return s;
}

test('a signed lock carries the proof and its write is accepted', async (t) => {
  const s = signedStack(t);
  const locks = s.signedLocks();
  const entry = unique('e');
  const lock = await locks.acquire('ledger:' + entry);
  assert.equal(lock.proof, expectedProof('ledger:' + entry, lock.token));
  await lock.transaction(await s.connect(env('FENCEGATE_TEST_SIGNED_DSN')), (c) =>
    c.query('INSERT INTO ledger (id, holder, token) VALUES ($1, $2, $3)', [entry, 'node', lock.token.toString()]),
  );
  await lock.release();
  assert.deepEqual(await s.ledger(entry), [{ holder: 'node', token: lock.token.toString() }]);
  assert.equal(await s.mark('ledger:' + entry), lock.token);
  const tc = new TokenClient(env('FENCEGATE_TEST_SIGNED_TOKEN_SERVERS').split(','));
  t.after(() => tc.close());
  const tok = await tc.next('ledger:' + entry);
  assert.equal(tok.proof, expectedProof('ledger:' + entry, tok.token));
});

test('a forged proof or one of another resource is refused and advances nothing', async (t) => {
  const s = signedStack(t);
  const locks = s.signedLocks();
  const conn = await s.connect(env('FENCEGATE_TEST_SIGNED_DSN'));
  const entry = unique('e');
  const res = 'ledger:' + entry;
  const lock = await locks.acquire(res);
  const other = await locks.acquire('ledger:' + unique('other'));
  for (const proof of [forge(lock.proof), other.proof]) {
    lock.proof = proof;
    await assert.rejects(
      lock.transaction(conn, (c) => c.query('INSERT INTO ledger (id, holder, token) VALUES ($1, $2, $3)', [entry, 'forger', '1'])),
      (e) => e instanceof BadProofError && e.code === 'FG008' && e.resource === res,
    );
  }
  assert.equal(await s.mark(res), null);
  assert.deepEqual(await s.ledger(entry), []);
  // A malformed proof is misuse (FG003).
  lock.proof = 'not a proof';
  await assert.rejects(lock.transaction(conn, async () => {}), (e) => e instanceof FenceMisuseError && e.code === 'FG003');
  await lock.release();
  await other.release();
});

test('a token without proof is refused by a database that requires them', async (t) => {
  const s = signedStack(t);
  // The unsigned cluster's tokens carry no proof.
  const locks = s.locks();
  const conn = await s.connect(env('FENCEGATE_TEST_SIGNED_DSN'));
  const entry = unique('e');
  const lock = await locks.acquire('ledger:' + entry);
  assert.equal(lock.proof, null);
  await assert.rejects(
    lock.transaction(conn, (c) => c.query('INSERT INTO ledger (id, holder, token) VALUES ($1, $2, $3)', [entry, 'unsigned', '1'])),
    (e) => e instanceof FenceMisuseError && e.code === 'FG003',
  );
  await lock.release();
  assert.equal(await s.mark('ledger:' + entry), null);
});

test('proofs on a database that does not require them are accepted', async (t) => {
  const s = signedStack(t);
  const locks = s.signedLocks();
  // A resource of its own: the signing cluster counts its own tokens.
  const acct = unique('acct');
  const lock = await locks.acquire('account:' + acct);
  assert.ok(lock.proof);
  await lock.transaction(await s.connect(), (c) => c.query('INSERT INTO accounts (id, balance) VALUES ($1, 1)', [acct]));
  await lock.release();
  assert.equal(await s.balance(acct), 1);
});
