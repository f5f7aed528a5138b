package proxy

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// FenceSQL is exactly what the proxy sends upstream for a client's
// "SELECT fencegate.fence(resource, token)": it switches the transaction,
// which the proxy keeps read-only until a fence is taken, to read-write and
// then calls the fence function. A direct client (not through the proxy)
// gets the same effect, and the same cost, by sending these two statements
// with the resource and token in place of $1 and $2.
const FenceSQL = "SET TRANSACTION READ WRITE; SELECT fencegate.fence($1, $2)"

// setReadWriteSQL is the statement the proxy injects before a fence call.
const setReadWriteSQL = "SET TRANSACTION READ WRITE"

// schemaVersionProc names a function whose presence says the installed
// schema is the one this code expects.
const schemaVersionProc = "fencegate.schema_v1()"

// installLockKey is the advisory lock key under which the schema is
// installed, so that two proxies starting at once do not race. It spells
// "fencegat" in ASCII.
const installLockKey int64 = 0x66656e6365676174

// SchemaSQL installs (idempotently) the fencegate schema: the per-resource
// high-water marks and the functions. It is one multi-statement string and
// runs as one implicit transaction; run it in a read-write transaction.
var SchemaSQL = strings.Replace(`SELECT pg_advisory_xact_lock(LOCKKEY);
CREATE SCHEMA IF NOT EXISTS fencegate;
CREATE TABLE IF NOT EXISTS fencegate.marks (
	resource   text PRIMARY KEY,
	token      bigint NOT NULL CHECK (token >= 0),
	updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE fencegate.marks IS 'fencegate: last accepted fencing token per resource';
CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint) RETURNS bigint
LANGUAGE plpgsql AS $fg$
#variable_conflict use_column
DECLARE
	cur bigint;
BEGIN
	IF fence.resource IS NULL OR fence.resource = '' THEN
		RAISE EXCEPTION 'fencegate: fence needs a non-empty resource name'
			USING ERRCODE = 'FG003',
			HINT = 'Call SELECT fencegate.fence(resource, token) first in the transaction that writes the resource.';
	END IF;
	IF fence.token IS NULL OR fence.token < 0 THEN
		RAISE EXCEPTION 'fencegate: fence for resource % needs a non-negative token, got %', quote_literal(fence.resource), coalesce(fence.token::text, 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Pass the fencing token the lock service handed out with the lock.';
	END IF;
	IF current_setting('transaction_read_only') = 'on' THEN
		RAISE EXCEPTION 'fencegate: fence for resource % must be its own statement, first in its transaction', quote_literal(fence.resource)
			USING ERRCODE = 'FG003',
			HINT = 'Send BEGIN, then SELECT fencegate.fence(resource, token) as a statement of its own, then the transaction''s reads and writes.';
	END IF;
	INSERT INTO fencegate.marks AS m (resource, token) VALUES (fence.resource, fence.token)
		ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
		WHERE m.token <= EXCLUDED.token
		RETURNING m.token INTO cur;
	IF NOT FOUND THEN
		SELECT m.token INTO cur FROM fencegate.marks m WHERE m.resource = fence.resource;
		RAISE EXCEPTION 'fencegate: stale token % for resource %: current token is %', fence.token, quote_literal(fence.resource), cur
			USING ERRCODE = 'FG001',
			HINT = 'A newer lock holder has written this resource; this holder lost its lock and must not write.';
	END IF;
	RETURN cur;
END
$fg$;
COMMENT ON FUNCTION fencegate.fence(text, bigint) IS 'fencegate: check-and-advance the fencing token of a resource; holds the row lock to the end of the transaction';
CREATE OR REPLACE FUNCTION fencegate.fence_alone() RETURNS bigint
LANGUAGE plpgsql AS $fg$
BEGIN
	RAISE EXCEPTION 'fencegate: fence alone in autocommit protects nothing'
		USING ERRCODE = 'FG003',
		HINT = 'Call SELECT fencegate.fence(resource, token) inside the transaction that writes: BEGIN; SELECT fencegate.fence(...); UPDATE ...; COMMIT.';
END
$fg$;
CREATE OR REPLACE FUNCTION fencegate.schema_v1() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1'`,
	"LOCKKEY", strconv.FormatInt(installLockKey, 10), 1)

// checkSchemaSQL answers whether the current schema version is installed.
const checkSchemaSQL = "SELECT to_regprocedure('" + schemaVersionProc + "') IS NOT NULL"

// EnsureSchema installs the fencegate schema and functions in the database
// conn is connected to, unless they are already there. It is idempotent and
// safe to run from several processes at once (it serializes on an advisory
// lock). The proxy does the same by itself, through the first client session
// it sees for each database; call EnsureSchema to install ahead of time, for
// example with an owner role when application roles may not create schemas.
func EnsureSchema(ctx context.Context, conn *pgx.Conn) error {
	var ok bool
	if err := conn.QueryRow(ctx, checkSchemaSQL).Scan(&ok); err != nil {
		return fmt.Errorf("check fencegate schema: %w", err)
	}
	if ok {
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, setReadWriteSQL); err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	if _, err := tx.Exec(ctx, SchemaSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	return nil
}
