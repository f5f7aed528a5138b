// fencegate: Redis locks (one node or Redlock) with fencing tokens from the
// fencegate token service, and PostgreSQL transactions that refuse a holder
// who lost its lock. The lock protocol is docs/protocol.md of the fencegate
// repository: the same Redis keys, values and scripts as the Go lockclient
// and the Python client, so processes in all three languages contend for one
// lock correctly.

export { LockClient, DEFAULT_KEY_PREFIX, noRetry, fixedRetry, exponentialRetry } from './lib/client.js';
export { Lock } from './lib/lock.js';
export { TokenClient, MAX_RESOURCE_BYTES, checkResource } from './lib/tokens.js';
export { transaction, mapError, sqlstate, FENCE_SQL, FENCE_SIGNED_SQL } from './lib/fence.js';
export { recordEffect, EFFECT_SQL } from './lib/effect.js';
export { EXTEND_SCRIPT, RELEASE_SCRIPT, EXTEND_SHA, RELEASE_SHA } from './lib/nodes.js';
export * from './lib/errors.js';
