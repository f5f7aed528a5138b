-- Schema fencegate version 1, exactly as the proxy installed it by itself
-- (proxy/schema.go before version 2), for the upgrade tests.
SELECT pg_advisory_xact_lock(7378424937698517364);
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
CREATE OR REPLACE FUNCTION fencegate.schema_v1() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1';
