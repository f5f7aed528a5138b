// The error map of docs/protocol.md, row by row (lockclient/testdata/
// error-map.json, which the Go and Python suites drive too), against the
// real stack, straight to PostgreSQL and through the gate.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import {
  BadProofError,
  CommitUnknownError,
  FenceError,
  FenceMisuseError,
  FenceTimeoutError,
  PrivilegedRoleError,
  ProtectedDDLError,
  SchemaInvalidError,
  SerializationError,
  StaleTokenError,
  UnfencedWriteError,
} from '../index.js';
import { Stack, env, test, unique } from './support.js';

const MAP = new URL('../../../lockclient/testdata/error-map.json', import.meta.url);

const COMMIT_PROBE = `CREATE TEMP TABLE IF NOT EXISTS fg_commit_probe (x int);
CREATE OR REPLACE FUNCTION pg_temp.fg_raise() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'fencegate: raised at commit by the test' USING ERRCODE = current_setting('fg.code'); END $$;
DROP TRIGGER IF EXISTS fg_commit_probe_t ON fg_commit_probe;
CREATE CONSTRAINT TRIGGER fg_commit_probe_t AFTER INSERT ON fg_commit_probe DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION pg_temp.fg_raise()`;

const KINDS = [
  [CommitUnknownError, 'commit_unknown'],
  [StaleTokenError, 'stale_token'],
  [UnfencedWriteError, 'unfenced'],
  [FenceMisuseError, 'fence_misuse'],
  [FenceTimeoutError, 'fence_timeout'],
  [SchemaInvalidError, 'schema_invalid'],
  [ProtectedDDLError, 'protected_ddl'],
  [PrivilegedRoleError, 'privileged_role'],
  [BadProofError, 'bad_proof'],
  [FenceError, 'fence_error'],
  [SerializationError, 'serialization'],
];

function kind(err) {
  if (err === null) return 'ok';
  for (const [cls, name] of KINDS) if (err instanceof cls) return name;
  return 'failed';
}

test('the error map, row by row', async (t) => {
  const s = new Stack(t);
  const { rows } = JSON.parse(readFileSync(MAP, 'utf8'));
  const locks = s.locks({ txRetries: 1 });
  let checks = 0;
  for (const [where, dsnVar] of [
    ['straight', 'FENCEGATE_TEST_APP_DIRECT_DSN'],
    ['through the gate', 'FENCEGATE_TEST_DSN'],
  ]) {
    const conn = await s.connect(env(dsnVar));
    await conn.query(COMMIT_PROBE);
    for (const row of rows) {
      const want = row.node ?? row.kind;
      if (row.at === 'session' && where === 'straight') continue;
      const lock = await locks.acquire(unique('errmap'));
      let err = null;
      try {
        if (row.at === 'session') {
          // The administrator (a superuser) through the gate, on a pool.
          const u = new URL(env(dsnVar));
          const a = new URL(env('FENCEGATE_TEST_ADMIN_DSN'));
          u.username = a.username;
          u.password = a.password;
          const pool = new pg.Pool({ connectionString: u.toString(), max: 1 });
          s.closers.push(() => pool.end().catch(() => {}));
          await lock.transaction(pool, () => {});
        } else {
          await lock.transaction(conn, async (c) => {
            if (row.at === 'body') {
              await c.query(`DO $$ BEGIN RAISE EXCEPTION 'fencegate: raised by the test' USING ERRCODE = '${row.sqlstate}'; END $$`);
            } else {
              await c.query("SELECT set_config('fg.code', $1, true)", [row.sqlstate]);
              await c.query('INSERT INTO fg_commit_probe VALUES (1)');
            }
          });
        }
      } catch (e) {
        err = e;
      } finally {
        await lock.release();
      }
      assert.equal(kind(err), want, `${where}: ${row.sqlstate} at ${row.at}: ${err && err.constructor.name}: ${err && err.message}`);
      checks++;
    }
  }
  console.log(`error map: ${rows.length} rows, ${checks} checks passed`);
});
