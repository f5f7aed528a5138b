// Effects: calls to other systems that a fenced transaction records and a
// relay ("fencegate relay") makes once the transaction commits.

import { mapError } from './fence.js';

// The statement that records an effect: the resource, the relay's target
// name and the JSON payload. It returns the effect's id and fails with FG002
// (UnfencedWriteError) unless the transaction holds a standing fence on the
// resource.
export const EFFECT_SQL = 'SELECT fencegate.effect($1::text, $2::text, $3::jsonb)::text AS id';

// recordEffect records, in the fenced transaction of client (the client
// lock.transaction hands to its callback), that payload is to be POSTed to
// the relay's target named target once the transaction commits, with the
// lock's resource and token in the Fencing-Resource and Fencing-Token
// headers and an Idempotency-Key that stays the same across retries. It
// resolves to the effect's id (a BigInt). payload is encoded with
// JSON.stringify; a Buffer is taken as JSON as it is. A rollback leaves no
// effect; a stale holder never gets here (its fence threw StaleTokenError).
export async function recordEffect(client, lock, target, payload) {
  let body;
  if (Buffer.isBuffer(payload)) {
    body = payload.toString('utf8');
    JSON.parse(body); // must be JSON
  } else {
    body = JSON.stringify(payload);
    if (body === undefined) throw new TypeError('fencegate: recordEffect: the payload has no JSON form');
  }
  try {
    const res = await client.query(EFFECT_SQL, [lock.resource, target, body]);
    return BigInt(res.rows[0].id);
  } catch (e) {
    throw mapError(e, lock.resource, lock.token) ?? e;
  }
}
