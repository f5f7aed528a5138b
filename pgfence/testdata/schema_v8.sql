-- fencegate schema, version 8: the marks, the floor, the fence, the
-- checks of protected tables and the effects (the fenced outbox). Install.go runs this file as the owner role
-- (SET LOCAL ROLE), inside the install transaction, after it has made sure
-- the schema exists and belongs to that role. Every statement is
-- idempotent: the file runs on a fresh schema, on a version 1 to 7 schema
-- (whose marks it keeps; the floor starts at 0, the effects empty) and on
-- a version 8 schema that was altered (it puts every function back).
--
-- Rules every function below keeps (pgfence/DESIGN.md argues why):
--   * search_path is pinned to pg_catalog, pg_temp by a SET clause;
--   * no text a caller chose is ever executed as SQL by a SECURITY DEFINER
--     function; the check functions run as the writer (SECURITY INVOKER) and
--     take nothing from trigger arguments;
--   * resources compare byte for byte (COLLATE "C").
-- Function bodies are fingerprinted by HealthQuery (health.go); a test keeps
-- the fingerprints and this file in step.

CREATE TABLE IF NOT EXISTS fencegate.marks (
	resource   text COLLATE "C" PRIMARY KEY,
	token      bigint NOT NULL CHECK (token >= 0),
	updated_at timestamptz NOT NULL DEFAULT now()
);
-- Version 1 lacked the holder columns and compared resources under the
-- database's default collation.
ALTER TABLE fencegate.marks ADD COLUMN IF NOT EXISTS holder_xid xid8;
ALTER TABLE fencegate.marks ADD COLUMN IF NOT EXISTS holder_boot timestamptz;
DO $do$
BEGIN
	IF (SELECT a.attcollation FROM pg_catalog.pg_attribute a
	    WHERE a.attrelid = 'fencegate.marks'::pg_catalog.regclass AND a.attname = 'resource')
	   IS DISTINCT FROM 'pg_catalog."C"'::pg_catalog.regcollation THEN
		ALTER TABLE fencegate.marks ALTER COLUMN resource TYPE text COLLATE "C";
	END IF;
END
$do$;
COMMENT ON TABLE fencegate.marks IS 'fencegate: the last accepted fencing token per resource, and the transaction that holds its fence';
COMMENT ON COLUMN fencegate.marks.holder_xid IS 'fencegate: top-level transaction (pg_current_xact_id) that last took this fence';
COMMENT ON COLUMN fencegate.marks.holder_boot IS 'fencegate: pg_postmaster_start_time() of the server that ran holder_xid';

CREATE TABLE IF NOT EXISTS fencegate.audit (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at           timestamptz NOT NULL DEFAULT clock_timestamp(),
	by_session   text NOT NULL DEFAULT session_user,
	by_role      text NOT NULL DEFAULT current_user,
	client_addr  inet DEFAULT inet_client_addr(),
	resource     text COLLATE "C" NOT NULL,
	old_token    bigint,
	new_token    bigint NOT NULL,
	reason       text
);
COMMENT ON TABLE fencegate.audit IS 'fencegate: every mark set by fencegate.set_mark (the only way a mark goes down)';

-- signing_keys holds the keys a database that requires signed tokens
-- verifies proofs with (version 3). Empty: the database does not require
-- them (the default). "fencegate schema require-signed" fills it. Only the
-- owner role reads it: no grant is ever given on it (HealthQuery reports
-- one, Install revokes it). A key is stored as its HMAC-SHA256 pads (K0 XOR
-- ipad, K0 XOR opad), from which the built-in sha256 alone computes the
-- MAC, and message_prefix is the fixed start of every signed message: the
-- domain and the length-prefixed cluster id (package tokensign documents
-- the message).
CREATE TABLE IF NOT EXISTS fencegate.signing_keys (
	key_id         text COLLATE "C" PRIMARY KEY,
	cluster_id     text NOT NULL,
	message_prefix bytea NOT NULL,
	inner_pad      bytea NOT NULL CHECK (octet_length(inner_pad) = 64),
	outer_pad      bytea NOT NULL CHECK (octet_length(outer_pad) = 64),
	position       integer NOT NULL,
	added_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE fencegate.signing_keys IS 'fencegate: keys that verify token proofs; while it has rows, fences need signed tokens';

-- floor is the mark of every resource that has none (version 5): a fence
-- with a token at or below it is refused. fencegate.prune raises it and then
-- deletes the marks at or below it. It is a sequence because a sequence is
-- read outside MVCC: SELECT last_value sees the latest setval whatever the
-- reading transaction's snapshot (pgfence/DESIGN.md, "Pruning marks").
CREATE SEQUENCE IF NOT EXISTS fencegate.floor AS bigint MINVALUE 0 START 0;
DO $do$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_sequence s
	               WHERE s.seqrelid = 'fencegate.floor'::pg_catalog.regclass AND s.seqtypid = 'pg_catalog.int8'::pg_catalog.regtype
	                 AND s.seqincrement = 1 AND s.seqmin = 0 AND s.seqmax = 9223372036854775807 AND NOT s.seqcycle) THEN
		ALTER SEQUENCE fencegate.floor AS bigint INCREMENT 1 MINVALUE 0 MAXVALUE 9223372036854775807 NO CYCLE;
	END IF;
	IF (SELECT c.relpersistence FROM pg_catalog.pg_class c WHERE c.oid = 'fencegate.floor'::pg_catalog.regclass) <> 'p' THEN
		ALTER SEQUENCE fencegate.floor SET LOGGED;
	END IF;
END
$do$;
COMMENT ON SEQUENCE fencegate.floor IS 'fencegate: the floor: last_value is the mark of every resource without one; only fencegate.prune moves it, upward';

-- schema_version names the version this file installs.
CREATE OR REPLACE FUNCTION fencegate.schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fg$SELECT 8$fg$;

-- fence check-and-advances the mark of one resource and records that this
-- top-level transaction holds it. It runs as the owner role, which alone may
-- write the marks.
CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $fg$
#variable_conflict use_column
DECLARE
	cur  bigint;
	flr  bigint;
	wait text := current_setting('fencegate.fence_timeout', true);
	chk  record;
BEGIN
	IF fence.resource IS NULL OR fence.resource = '' OR octet_length(convert_to(fence.resource, 'UTF8')) > 1024 THEN
		IF fence.resource IS NULL OR fence.resource = '' THEN
			RAISE EXCEPTION 'fencegate: fence needs a non-empty resource name'
				USING ERRCODE = 'FG003',
				HINT = 'Call SELECT fencegate.fence(resource, token) with the resource the lock was taken on.';
		END IF;
		RAISE EXCEPTION 'fencegate: resource name of % bytes is too long: the token service takes at most 1024 bytes (UTF-8)', octet_length(convert_to(fence.resource, 'UTF8'))
			USING ERRCODE = 'FG003',
			HINT = 'Use the resource name the lock was taken on; no token can exist for a longer one.';
	END IF;
	IF fence.token IS NULL OR fence.token < 0 THEN
		RAISE EXCEPTION 'fencegate: fence for resource % needs a non-negative token, got %', quote_literal(fence.resource), coalesce(fence.token::text, 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Pass the fencing token the lock service handed out with the lock.';
	END IF;
	SELECT (SELECT count(*) FROM pg_proc p
	        WHERE p.pronamespace = 'fencegate'::regnamespace AND p.proname IN ('fence', 'fence_many')) AS fns,
	       EXISTS (SELECT 1 FROM fencegate.signing_keys) AS signed
	INTO chk;
	IF chk.fns <> 3 THEN
		RAISE EXCEPTION 'fencegate: schema fencegate is altered (a function named fence or fence_many was added or removed): an administrator runs "fencegate schema upgrade" to repair it'
			USING ERRCODE = 'FG005',
			HINT = '"fencegate schema status" lists every problem.';
	END IF;
	IF chk.signed THEN
		RAISE EXCEPTION 'fencegate: this database requires signed tokens: fence for resource % with token % has no proof; call fencegate.fence(resource, token, proof) with the proof the token service returns beside the token', quote_literal(fence.resource), fence.token
			USING ERRCODE = 'FG003',
			HINT = 'lockclient passes the proof by itself when the token service signs; "fencegate token next --proof RESOURCE" prints a token and its proof.';
	END IF;
	IF wait IS NOT NULL AND wait <> '' THEN
		PERFORM set_config('lock_timeout', wait, true);
	END IF;
	BEGIN
		INSERT INTO fencegate.marks AS m (resource, token, updated_at, holder_xid, holder_boot)
		VALUES (fence.resource, fence.token, now(), pg_current_xact_id(), pg_postmaster_start_time())
		ON CONFLICT (resource) DO UPDATE
			SET token = EXCLUDED.token, updated_at = EXCLUDED.updated_at,
			    holder_xid = EXCLUDED.holder_xid, holder_boot = EXCLUDED.holder_boot
			WHERE m.token <= EXCLUDED.token
		RETURNING m.token INTO cur;
	EXCEPTION WHEN lock_not_available THEN
		RAISE EXCEPTION 'fencegate: fence for resource % gave up after waiting % for the transaction that holds it', quote_literal(fence.resource), current_setting('lock_timeout')
			USING ERRCODE = 'FG004',
			HINT = 'Another transaction holds this resource''s fence and has not ended (a stalled lock holder?). Roll back and retry; idle_in_transaction_session_timeout ends stalled transactions.';
	END;
	IF cur IS NULL THEN
		SELECT m.token INTO cur FROM fencegate.marks m WHERE m.resource = fence.resource;
		RAISE EXCEPTION 'fencegate: stale token % for resource %: current token is %', fence.token, quote_literal(fence.resource), cur
			USING ERRCODE = 'FG001',
			HINT = 'A newer lock holder has written this resource; this holder lost its lock and must not write.';
	END IF;
	-- The floor is read after the upsert, which holds the mark's row lock:
	-- a prune raises the floor before it deletes a mark, and never deletes
	-- a locked one (pgfence/DESIGN.md, "Pruning marks").
	SELECT f.last_value INTO flr FROM fencegate.floor f;
	IF fence.token <= flr THEN
		RAISE EXCEPTION 'fencegate: stale token % for resource %: marks at or below % were pruned (floor %)', fence.token, quote_literal(fence.resource), flr, flr
			USING ERRCODE = 'FG001',
			HINT = 'Tokens at or below the floor are refused for every resource; this holder''s token is older than the marks that were pruned, so it must not write.';
	END IF;
	RETURN cur;
END
$fg$;

-- fence with a proof: the same check-and-advance, after verifying that the
-- token service signed (its cluster, this resource, this token) under a key
-- this database holds. Where signing_keys is empty (the database does not
-- require signed tokens) only the proof's form is checked. The proof is
-- verified before anything is locked or advanced.
CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint, proof text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $fg$
#variable_conflict use_column
DECLARE
	cur  bigint;
	flr  bigint;
	wait text := current_setting('fencegate.fence_timeout', true);
	chk  record;
BEGIN
	IF fence.resource IS NULL OR fence.resource = '' OR octet_length(convert_to(fence.resource, 'UTF8')) > 1024 THEN
		IF fence.resource IS NULL OR fence.resource = '' THEN
			RAISE EXCEPTION 'fencegate: fence needs a non-empty resource name'
				USING ERRCODE = 'FG003',
				HINT = 'Call SELECT fencegate.fence(resource, token, proof) with the resource the lock was taken on.';
		END IF;
		RAISE EXCEPTION 'fencegate: resource name of % bytes is too long: the token service takes at most 1024 bytes (UTF-8)', octet_length(convert_to(fence.resource, 'UTF8'))
			USING ERRCODE = 'FG003',
			HINT = 'Use the resource name the lock was taken on; no token can exist for a longer one.';
	END IF;
	IF fence.token IS NULL OR fence.token < 0 THEN
		RAISE EXCEPTION 'fencegate: fence for resource % needs a non-negative token, got %', quote_literal(fence.resource), coalesce(fence.token::text, 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Pass the fencing token the lock service handed out with the lock.';
	END IF;
	-- One query for every check, and one test on its result when all is
	-- well: plpgsql prepares each expression it evaluates once per
	-- transaction, so fewer of them keep a fence in its own transaction
	-- cheap. The MAC is computed under the key the proof names and compared
	-- as hex text (nothing here can fail on what the caller sent). (Counted repetitions make
	-- PostgreSQL's regex engine about 10 us slower: lengths are checked
	-- apart.)
	SELECT CASE
	         WHEN NOT w.formed THEN 'malformed'
	         WHEN (SELECT count(*) FROM pg_proc p
	               WHERE p.pronamespace = 'fencegate'::regnamespace AND p.proname IN ('fence', 'fence_many')) <> 3 THEN 'altered'
	         WHEN s.key_id IS NULL THEN CASE WHEN EXISTS (SELECT 1 FROM fencegate.signing_keys) THEN 'unknown' END
	         WHEN encode(sha256(s.outer_pad || sha256(s.inner_pad || s.message_prefix || int4send(octet_length(convert_to(fence.resource, 'UTF8')))
	                     || convert_to(fence.resource, 'UTF8') || int8send(fence.token))), 'hex') <> split_part(fence.proof, '.', 2) THEN 'bad'
	       END AS problem,
	       s.cluster_id
	INTO chk
	FROM (SELECT fence.proof IS NOT NULL AND fence.proof COLLATE "C" ~ '^[A-Za-z0-9_-]+\.[0-9a-f]+$'
	             AND length(split_part(fence.proof, '.', 1)) <= 64 AND length(split_part(fence.proof, '.', 2)) = 64 AS formed) w
	LEFT JOIN fencegate.signing_keys s ON w.formed AND s.key_id = split_part(fence.proof, '.', 1);
	IF chk.problem IS NOT NULL THEN
		IF chk.problem = 'malformed' THEN
			RAISE EXCEPTION 'fencegate: the proof for token % of resource % is malformed: %', fence.token, quote_literal(fence.resource),
				CASE WHEN fence.proof IS NULL OR fence.proof = '' THEN 'it is empty'
				     WHEN strpos(fence.proof, '.') = 0 THEN 'it has no "." (a proof is KEYID.HEX)'
				     WHEN split_part(fence.proof, '.', 1) COLLATE "C" !~ '^[A-Za-z0-9_-]{1,64}$' THEN 'its key id (before the ".") must be 1 to 64 letters, digits, _ or -'
				     ELSE format('it must end in 64 lowercase hex digits after the ".", got %s characters', length(substr(fence.proof, strpos(fence.proof, '.') + 1))) END
				USING ERRCODE = 'FG003',
				HINT = 'Pass the proof exactly as the token service returned it beside the token (KEYID.HEX).';
		ELSIF chk.problem = 'altered' THEN
			RAISE EXCEPTION 'fencegate: schema fencegate is altered (a function named fence or fence_many was added or removed): an administrator runs "fencegate schema upgrade" to repair it'
				USING ERRCODE = 'FG005',
				HINT = '"fencegate schema status" lists every problem.';
		ELSIF chk.problem = 'unknown' THEN
			RAISE EXCEPTION 'fencegate: token % for resource % is refused: its proof is under key %, which this database does not hold', fence.token, quote_literal(fence.resource), split_part(fence.proof, '.', 1)
				USING ERRCODE = 'FG008',
				HINT = 'After a key rotation, give the database the new key list: fencegate schema require-signed --signing-keys FILE. Nothing was advanced.';
		END IF;
		RAISE EXCEPTION 'fencegate: token % for resource % is refused: its proof does not verify under key % (forged, minted for another resource, or by a token service other than cluster %)', fence.token, quote_literal(fence.resource), split_part(fence.proof, '.', 1), chk.cluster_id
			USING ERRCODE = 'FG008',
			HINT = 'Use the token and proof the token service returned for this very resource; nothing was advanced.';
	END IF;
	IF wait IS NOT NULL AND wait <> '' THEN
		PERFORM set_config('lock_timeout', wait, true);
	END IF;
	BEGIN
		INSERT INTO fencegate.marks AS m (resource, token, updated_at, holder_xid, holder_boot)
		VALUES (fence.resource, fence.token, now(), pg_current_xact_id(), pg_postmaster_start_time())
		ON CONFLICT (resource) DO UPDATE
			SET token = EXCLUDED.token, updated_at = EXCLUDED.updated_at,
			    holder_xid = EXCLUDED.holder_xid, holder_boot = EXCLUDED.holder_boot
			WHERE m.token <= EXCLUDED.token
		RETURNING m.token INTO cur;
	EXCEPTION WHEN lock_not_available THEN
		RAISE EXCEPTION 'fencegate: fence for resource % gave up after waiting % for the transaction that holds it', quote_literal(fence.resource), current_setting('lock_timeout')
			USING ERRCODE = 'FG004',
			HINT = 'Another transaction holds this resource''s fence and has not ended (a stalled lock holder?). Roll back and retry; idle_in_transaction_session_timeout ends stalled transactions.';
	END;
	IF cur IS NULL THEN
		SELECT m.token INTO cur FROM fencegate.marks m WHERE m.resource = fence.resource;
		RAISE EXCEPTION 'fencegate: stale token % for resource %: current token is %', fence.token, quote_literal(fence.resource), cur
			USING ERRCODE = 'FG001',
			HINT = 'A newer lock holder has written this resource; this holder lost its lock and must not write.';
	END IF;
	-- The floor is read after the upsert, which holds the mark's row lock:
	-- a prune raises the floor before it deletes a mark, and never deletes
	-- a locked one (pgfence/DESIGN.md, "Pruning marks").
	SELECT f.last_value INTO flr FROM fencegate.floor f;
	IF fence.token <= flr THEN
		RAISE EXCEPTION 'fencegate: stale token % for resource %: marks at or below % were pruned (floor %)', fence.token, quote_literal(fence.resource), flr, flr
			USING ERRCODE = 'FG001',
			HINT = 'Tokens at or below the floor are refused for every resource; this holder''s token is older than the marks that were pruned, so it must not write.';
	END IF;
	RETURN cur;
END
$fg$;

-- fence_many fences every resource of an array with one token, locking the
-- marks in one order (byte-wise, duplicates removed) so that two bulk writers
-- never deadlock on each other.
CREATE OR REPLACE FUNCTION fencegate.fence_many(resources text[], token bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $fg$
#variable_conflict use_column
DECLARE
	want  bigint;
	done  bigint;
	bad   text;
	cur   bigint;
	flr   bigint;
	wait  text := current_setting('fencegate.fence_timeout', true);
BEGIN
	IF fence_many.token IS NULL OR fence_many.token < 0 THEN
		RAISE EXCEPTION 'fencegate: fence_many needs a non-negative token, got %', coalesce(fence_many.token::text, 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Pass the fencing token the lock service handed out with the lock.';
	END IF;
	IF fence_many.resources IS NULL OR cardinality(fence_many.resources) = 0
	   OR EXISTS (SELECT 1 FROM unnest(fence_many.resources) r WHERE r IS NULL OR r = '') THEN
		RAISE EXCEPTION 'fencegate: fence_many needs a non-empty list of non-empty resource names'
			USING ERRCODE = 'FG003',
			HINT = 'Call SELECT fencegate.fence_many(resources, token) with the resources the lock covers.';
	END IF;
	IF EXISTS (SELECT 1 FROM unnest(fence_many.resources) r WHERE octet_length(convert_to(r, 'UTF8')) > 1024) THEN
		RAISE EXCEPTION 'fencegate: fence_many got a resource name longer than 1024 bytes (UTF-8), which the token service never takes'
			USING ERRCODE = 'FG003',
			HINT = 'Use the resource names the lock was taken on.';
	END IF;
	IF (SELECT count(*) FROM pg_proc p
	    WHERE p.pronamespace = 'fencegate'::regnamespace AND p.proname IN ('fence', 'fence_many')) <> 3 THEN
		RAISE EXCEPTION 'fencegate: schema fencegate is altered (a function named fence or fence_many was added or removed): an administrator runs "fencegate schema upgrade" to repair it'
			USING ERRCODE = 'FG005',
			HINT = '"fencegate schema status" lists every problem.';
	END IF;
	IF wait IS NOT NULL AND wait <> '' THEN
		PERFORM set_config('lock_timeout', wait, true);
	END IF;
	IF EXISTS (SELECT 1 FROM fencegate.signing_keys) THEN
		RAISE EXCEPTION 'fencegate: this database requires signed tokens, and fence_many has no proof (its one token covers many resources): fence each resource with fencegate.fence(resource, token, proof)'
			USING ERRCODE = 'FG003',
			HINT = 'Take a token per resource from the token service; each comes with its proof.';
	END IF;
	SELECT count(DISTINCT r COLLATE "C") INTO want FROM unnest(fence_many.resources) r;
	BEGIN
		INSERT INTO fencegate.marks AS m (resource, token, updated_at, holder_xid, holder_boot)
		SELECT d.r, fence_many.token, now(), pg_current_xact_id(), pg_postmaster_start_time()
		FROM (SELECT DISTINCT r COLLATE "C" AS r FROM unnest(fence_many.resources) r) d
		ORDER BY d.r COLLATE "C"
		ON CONFLICT (resource) DO UPDATE
			SET token = EXCLUDED.token, updated_at = EXCLUDED.updated_at,
			    holder_xid = EXCLUDED.holder_xid, holder_boot = EXCLUDED.holder_boot
			WHERE m.token <= EXCLUDED.token;
		GET DIAGNOSTICS done = ROW_COUNT;
	EXCEPTION WHEN lock_not_available THEN
		RAISE EXCEPTION 'fencegate: fence_many gave up after waiting % for a transaction that holds one of its % resources', current_setting('lock_timeout'), want
			USING ERRCODE = 'FG004',
			HINT = 'Another transaction holds a fence on one of these resources and has not ended (a stalled lock holder?). Roll back and retry; idle_in_transaction_session_timeout ends stalled transactions.';
	END;
	IF done <> want THEN
		SELECT m.resource, m.token INTO bad, cur FROM fencegate.marks m
		WHERE m.resource = ANY (fence_many.resources) AND m.token > fence_many.token
		ORDER BY m.resource COLLATE "C" LIMIT 1;
		RAISE EXCEPTION 'fencegate: stale token % for resource %: current token is % (fence_many of % resources)', fence_many.token, quote_literal(bad), cur, want
			USING ERRCODE = 'FG001',
			HINT = 'A newer lock holder has written this resource; this holder lost its lock and must not write.';
	END IF;
	-- After the upsert, as in fence.
	SELECT f.last_value INTO flr FROM fencegate.floor f;
	IF fence_many.token <= flr THEN
		SELECT min(r COLLATE "C") INTO bad FROM unnest(fence_many.resources) r;
		RAISE EXCEPTION 'fencegate: stale token % for resource %: marks at or below % were pruned (floor %) (fence_many of % resources)', fence_many.token, quote_literal(bad), flr, flr, want
			USING ERRCODE = 'FG001',
			HINT = 'Tokens at or below the floor are refused for every resource; this holder''s token is older than the marks that were pruned, so it must not write.';
	END IF;
	RETURN fence_many.token;
END
$fg$;

-- check_insert, check_update and check_delete are the statement-level
-- checks of a protected table: every distinct resource among the rows the
-- statement wrote (old and new rows for UPDATE) must have a mark whose fence
-- this very transaction holds, on this running server. They run as the
-- writer, who may read the marks. Each costs one call and one query per
-- statement, whatever the number of rows, and a copy of each written row in
-- the transition tables. Since version 8 check_insert, check_update_new and
-- check_delete first compare every row's resource with the first row's (one
-- comparison per row, no hashing) and probe that one resource; only a
-- statement whose rows belong to several resources runs a second query that
-- groups them and probes each distinct one.
CREATE OR REPLACE FUNCTION fencegate.check_insert() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	bad  text;
	held boolean;
	more boolean;
BEGIN
	-- One pass, no hashing, for the common bulk write of one resource:
	-- the first row's resource, whether this transaction holds its fence,
	-- and whether any row's resource differs from it (the scan stops at
	-- the first that does). Only then are the distinct resources grouped
	-- and each probed.
	SELECT n.fencegate_resource,
	       EXISTS (SELECT 1 FROM fencegate.marks m
	               WHERE m.resource = n.fencegate_resource AND m.holder_xid = pg_current_xact_id() AND m.holder_boot = pg_postmaster_start_time()),
	       EXISTS (SELECT 1 FROM fg_new o WHERE o.fencegate_resource IS DISTINCT FROM n.fencegate_resource)
	INTO bad, held, more
	FROM fg_new n LIMIT 1;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	IF more THEN
		SELECT n.fencegate_resource INTO bad FROM fg_new n
		GROUP BY n.fencegate_resource
		HAVING n.fencegate_resource IS NULL OR n.fencegate_resource = '' OR NOT EXISTS (
			SELECT 1 FROM fencegate.marks m
			WHERE m.resource = n.fencegate_resource AND m.holder_xid = pg_current_xact_id() AND m.holder_boot = pg_postmaster_start_time());
		IF NOT FOUND THEN
			RETURN NULL;
		END IF;
	ELSIF held AND bad <> '' THEN
		RETURN NULL;
	END IF;
	IF bad IS NULL OR bad = '' THEN
		RAISE EXCEPTION 'fencegate: write to % refused: a row''s resource expression yields %', TG_RELID::regclass, coalesce(quote_literal(bad), 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Every row of a protected table must belong to a resource; fix the row or the table''s resource expression (fencegate protect).';
	END IF;
	RAISE EXCEPTION 'fencegate: write to % refused: this transaction holds no fence on resource %', TG_RELID::regclass, quote_literal(bad)
		USING ERRCODE = 'FG002',
		HINT = format('Take the lock on %s, then run SELECT fencegate.fence(%s, token) in this transaction before writing.', quote_literal(bad), quote_literal(bad));
END
$fg$;

CREATE OR REPLACE FUNCTION fencegate.check_update() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	me   xid8 := pg_current_xact_id();
	boot timestamptz := pg_postmaster_start_time();
	bad  text;
BEGIN
	SELECT n.r INTO bad FROM (
		SELECT fencegate_resource AS r FROM fg_new
		UNION
		SELECT fencegate_resource FROM fg_old) n
	WHERE n.r IS NULL OR n.r = '' OR NOT EXISTS (
		SELECT 1 FROM fencegate.marks m
		WHERE m.resource = n.r AND m.holder_xid = me AND m.holder_boot = boot)
	LIMIT 1;
	IF FOUND THEN
		IF bad IS NULL OR bad = '' THEN
			RAISE EXCEPTION 'fencegate: write to % refused: a row''s resource expression yields %', TG_RELID::regclass, coalesce(quote_literal(bad), 'NULL')
				USING ERRCODE = 'FG003',
				HINT = 'Every row of a protected table must belong to a resource; fix the row or the table''s resource expression (fencegate protect).';
		END IF;
		RAISE EXCEPTION 'fencegate: write to % refused: this transaction holds no fence on resource %', TG_RELID::regclass, quote_literal(bad)
			USING ERRCODE = 'FG002',
			HINT = format('Take the lock on %s, then run SELECT fencegate.fence(%s, token) in this transaction before writing.', quote_literal(bad), quote_literal(bad));
	END IF;
	RETURN NULL;
END
$fg$;

-- check_update_new is the UPDATE check of tables that hold rows (schema
-- version 7): every distinct resource among the statement's new rows. The
-- old row's resource needs no look-up of its own when it equals the new
-- one; a row whose resource changes is checked on its own, old resource
-- and new, by the row trigger fencegate_move (check_row), whose WHEN
-- condition is false for every other row, so those cost no call.
CREATE OR REPLACE FUNCTION fencegate.check_update_new() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	bad  text;
	held boolean;
	more boolean;
BEGIN
	SELECT n.fencegate_resource,
	       EXISTS (SELECT 1 FROM fencegate.marks m
	               WHERE m.resource = n.fencegate_resource AND m.holder_xid = pg_current_xact_id() AND m.holder_boot = pg_postmaster_start_time()),
	       EXISTS (SELECT 1 FROM fg_new o WHERE o.fencegate_resource IS DISTINCT FROM n.fencegate_resource)
	INTO bad, held, more
	FROM fg_new n LIMIT 1;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	IF more THEN
		SELECT n.fencegate_resource INTO bad FROM fg_new n
		GROUP BY n.fencegate_resource
		HAVING n.fencegate_resource IS NULL OR n.fencegate_resource = '' OR NOT EXISTS (
			SELECT 1 FROM fencegate.marks m
			WHERE m.resource = n.fencegate_resource AND m.holder_xid = pg_current_xact_id() AND m.holder_boot = pg_postmaster_start_time());
		IF NOT FOUND THEN
			RETURN NULL;
		END IF;
	ELSIF held AND bad <> '' THEN
		RETURN NULL;
	END IF;
	IF bad IS NULL OR bad = '' THEN
		RAISE EXCEPTION 'fencegate: write to % refused: a row''s resource expression yields %', TG_RELID::regclass, coalesce(quote_literal(bad), 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Every row of a protected table must belong to a resource; fix the row or the table''s resource expression (fencegate protect).';
	END IF;
	RAISE EXCEPTION 'fencegate: write to % refused: this transaction holds no fence on resource %', TG_RELID::regclass, quote_literal(bad)
		USING ERRCODE = 'FG002',
		HINT = format('Take the lock on %s, then run SELECT fencegate.fence(%s, token) in this transaction before writing.', quote_literal(bad), quote_literal(bad));
END
$fg$;

CREATE OR REPLACE FUNCTION fencegate.check_delete() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	bad  text;
	held boolean;
	more boolean;
BEGIN
	SELECT n.fencegate_resource,
	       EXISTS (SELECT 1 FROM fencegate.marks m
	               WHERE m.resource = n.fencegate_resource AND m.holder_xid = pg_current_xact_id() AND m.holder_boot = pg_postmaster_start_time()),
	       EXISTS (SELECT 1 FROM fg_old o WHERE o.fencegate_resource IS DISTINCT FROM n.fencegate_resource)
	INTO bad, held, more
	FROM fg_old n LIMIT 1;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	IF more THEN
		SELECT n.fencegate_resource INTO bad FROM fg_old n
		GROUP BY n.fencegate_resource
		HAVING n.fencegate_resource IS NULL OR n.fencegate_resource = '' OR NOT EXISTS (
			SELECT 1 FROM fencegate.marks m
			WHERE m.resource = n.fencegate_resource AND m.holder_xid = pg_current_xact_id() AND m.holder_boot = pg_postmaster_start_time());
		IF NOT FOUND THEN
			RETURN NULL;
		END IF;
	ELSIF held AND bad <> '' THEN
		RETURN NULL;
	END IF;
	IF bad IS NULL OR bad = '' THEN
		RAISE EXCEPTION 'fencegate: write to % refused: a row''s resource expression yields %', TG_RELID::regclass, coalesce(quote_literal(bad), 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Every row of a protected table must belong to a resource; fix the row or the table''s resource expression (fencegate protect).';
	END IF;
	RAISE EXCEPTION 'fencegate: write to % refused: this transaction holds no fence on resource %', TG_RELID::regclass, quote_literal(bad)
		USING ERRCODE = 'FG002',
		HINT = format('Take the lock on %s, then run SELECT fencegate.fence(%s, token) in this transaction before writing.', quote_literal(bad), quote_literal(bad));
END
$fg$;

-- check_row is the row-level check. It checks an UPDATE that changes a
-- row's resource (trigger fencegate_move, on tables that hold rows) and the
-- paths statement triggers miss: the logical replication apply worker
-- (which fires row triggers only), partitions created after protect ran (a
-- row trigger on a partitioned table is cloned to every new partition) and
-- rows a MERGE moves between partitions. The new row is checked, and the
-- old row of an UPDATE only when its resource differs from the new row's.
CREATE OR REPLACE FUNCTION fencegate.check_row() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	r text := CASE WHEN TG_OP = 'DELETE' THEN OLD.fencegate_resource ELSE NEW.fencegate_resource END;
BEGIN
	LOOP
		IF r IS NULL OR r = '' THEN
			RAISE EXCEPTION 'fencegate: write to % refused: a row''s resource expression yields %', TG_RELID::regclass, coalesce(quote_literal(r), 'NULL')
				USING ERRCODE = 'FG003',
				HINT = 'Every row of a protected table must belong to a resource; fix the row or the table''s resource expression (fencegate protect).';
		END IF;
		IF NOT EXISTS (SELECT 1 FROM fencegate.marks m
		               WHERE m.resource = r AND m.holder_xid = pg_current_xact_id()
		                 AND m.holder_boot = pg_postmaster_start_time()) THEN
			RAISE EXCEPTION 'fencegate: write to % refused: this transaction holds no fence on resource %', TG_RELID::regclass, quote_literal(r)
				USING ERRCODE = 'FG002',
				HINT = format('Take the lock on %s, then run SELECT fencegate.fence(%s, token) in this transaction before writing.', quote_literal(r), quote_literal(r));
		END IF;
		EXIT WHEN TG_OP <> 'UPDATE' OR OLD.fencegate_resource IS NOT DISTINCT FROM r;
		r := OLD.fencegate_resource;
	END LOOP;
	RETURN NULL;
END
$fg$;

-- refuse_truncate refuses TRUNCATE of a protected table, fenced or not:
-- TRUNCATE removes rows without row or statement DELETE triggers.
CREATE OR REPLACE FUNCTION fencegate.refuse_truncate() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
BEGIN
	RAISE EXCEPTION 'fencegate: TRUNCATE of protected table % refused', TG_RELID::regclass
		USING ERRCODE = 'FG006',
		HINT = 'Delete the rows in fenced transactions instead, or run "fencegate unprotect" first if the table is no longer guarded.';
END
$fg$;

-- tree lists a table and all its partitions and inheritance children, at
-- every depth, parents before children.
CREATE OR REPLACE FUNCTION fencegate.tree(tbl regclass) RETURNS TABLE (relid regclass, depth integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fg$
WITH RECURSIVE t(relid, depth) AS (
	SELECT tbl::oid, 0
	UNION ALL
	SELECT i.inhrelid, t.depth + 1 FROM t JOIN pg_inherits i ON i.inhparent = t.relid
	JOIN pg_class c ON c.oid = i.inhrelid AND c.relpersistence <> 't'
)
SELECT relid::regclass, depth FROM t ORDER BY depth, relid
$fg$;

-- shape gives one table of a protected hierarchy its triggers: statement-
-- level checks with transition tables for INSERT, UPDATE and DELETE, on
-- tables that hold rows the row-level check of an UPDATE that changes a
-- row's resource (WHEN the resource differs), and the TRUNCATE refusal
-- (ENABLE ALWAYS: they fire whatever session_replication_role says), the
-- row-level check for replica sessions such as the apply worker (ENABLE
-- REPLICA: it fires only there), and on a partitioned root the row-level
-- check that PostgreSQL clones to every future partition (ENABLE ALWAYS).
-- On a leaf partition that clone stays enabled: it checks the rows a MERGE
-- moves between partitions.
CREATE OR REPLACE FUNCTION fencegate.shape(tbl regclass) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	rel  record;
	trg  record;
	want record;
	have boolean;
	att  smallint;
BEGIN
	SELECT c.relkind, c.relispartition INTO rel FROM pg_class c WHERE c.oid = tbl;
	SELECT a.attnum INTO att FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = 'fencegate_resource' AND NOT a.attisdropped;
	FOR want IN
		SELECT * FROM (VALUES
			('fencegate_ins', 4, 'fencegate.check_insert()'::regprocedure, NULL::name, 'fg_new'::name, 'A', NULL::text,
			 'AFTER INSERT ON %s REFERENCING NEW TABLE AS fg_new FOR EACH STATEMENT EXECUTE FUNCTION fencegate.check_insert()'),
			('fencegate_upd', 16, 'fencegate.check_update()'::regprocedure, 'fg_old', 'fg_new', 'A', NULL,
			 'AFTER UPDATE ON %s REFERENCING OLD TABLE AS fg_old NEW TABLE AS fg_new FOR EACH STATEMENT EXECUTE FUNCTION fencegate.check_update()'),
			('fencegate_upd', 16, 'fencegate.check_update_new()'::regprocedure, NULL, 'fg_new', 'A', NULL,
			 'AFTER UPDATE ON %s REFERENCING NEW TABLE AS fg_new FOR EACH STATEMENT EXECUTE FUNCTION fencegate.check_update_new()'),
			('fencegate_move', 17, 'fencegate.check_row()'::regprocedure, NULL, NULL, 'A', 'resource change',
			 'AFTER UPDATE ON %s FOR EACH ROW WHEN (OLD.fencegate_resource IS DISTINCT FROM NEW.fencegate_resource) EXECUTE FUNCTION fencegate.check_row()'),
			('fencegate_del', 8, 'fencegate.check_delete()'::regprocedure, 'fg_old', NULL, 'A', NULL,
			 'AFTER DELETE ON %s REFERENCING OLD TABLE AS fg_old FOR EACH STATEMENT EXECUTE FUNCTION fencegate.check_delete()'),
			('fencegate_trunc', 34, 'fencegate.refuse_truncate()'::regprocedure, NULL, NULL, 'A', NULL,
			 'BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION fencegate.refuse_truncate()'),
			('fencegate_replica', 29, 'fencegate.check_row()'::regprocedure, NULL, NULL, 'R', NULL,
			 'AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION fencegate.check_row()'),
			('fencegate_row', 29, 'fencegate.check_row()'::regprocedure, NULL, NULL, 'A', NULL,
			 'AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION fencegate.check_row()')
		) AS w(name, tgtype, fn, oldtab, newtab, mode, qual, ddl)
	LOOP
		-- Row triggers of a partition are clones of its root's; only the
		-- root of a partition tree and tables outside partitioning carry
		-- their own. fencegate_row exists on partitioned roots only.
		CONTINUE WHEN want.tgtype = 29 AND rel.relispartition;
		CONTINUE WHEN want.name = 'fencegate_row' AND rel.relkind <> 'p';
		-- UPDATE: on tables that hold rows the new rows' resources are
		-- checked per statement and a row whose resource changes is
		-- checked on its own, old resource and new (fencegate_move); on
		-- partitioned tables both transition tables are read, because an
		-- UPDATE that moves a row to another partition fires no UPDATE
		-- row trigger (only the target table's statement trigger sees
		-- both rows).
		CONTINUE WHEN want.name = 'fencegate_upd' AND (want.fn = 'fencegate.check_update()'::regprocedure) <> (rel.relkind = 'p');
		CONTINUE WHEN want.name = 'fencegate_move' AND rel.relkind = 'p';
		SELECT t.* INTO trg FROM pg_trigger t WHERE t.tgrelid = tbl AND t.tgname = want.name;
		have := FOUND;
		IF have AND NOT (trg.tgfoid = want.fn AND trg.tgtype = want.tgtype
		                 AND trg.tgoldtable IS NOT DISTINCT FROM want.oldtab
		                 AND trg.tgnewtable IS NOT DISTINCT FROM want.newtab
		                 -- fencegate_move's WHEN condition, read from its
		                 -- stored node tree (printing it would lock the
		                 -- table): one IS DISTINCT FROM with pg_catalog's
		                 -- text equality under the byte-wise collation,
		                 -- between OLD's (varno 1) and NEW's (varno 2)
		                 -- fencegate_resource, and no other node.
		                 AND CASE WHEN want.qual IS NULL THEN trg.tgqual IS NULL
		                          ELSE trg.tgqual::text ~ ('^\{DISTINCTEXPR :opno ' || 'pg_catalog.=(text,text)'::regoperator::oid || ' ')
		                               AND strpos(trg.tgqual::text, ' :inputcollid ' || 'pg_catalog."C"'::regcollation::oid || ' ') > 0
		                               AND length(trg.tgqual::text) - length(replace(trg.tgqual::text, '{', '')) = 3
		                               AND strpos(trg.tgqual::text, '{VAR :varno 1 :varattno ' || att || ' ') > 0
		                               AND strpos(trg.tgqual::text, '{VAR :varno 2 :varattno ' || att || ' ') > 0 END
		                 AND trg.tgparentid = 0 AND NOT trg.tgisinternal
		                 AND trg.tgnargs = 0 AND cardinality(trg.tgattr::int2[]) = 0) THEN
			EXECUTE format('DROP TRIGGER %I ON %s', want.name, tbl);
			have := false;
		END IF;
		IF NOT have THEN
			EXECUTE format('CREATE TRIGGER %I ', want.name) || format(want.ddl, tbl);
		END IF;
		IF NOT have OR trg.tgenabled <> want.mode THEN
			EXECUTE format('ALTER TABLE ONLY %s ENABLE %s TRIGGER %I', tbl, CASE want.mode WHEN 'R' THEN 'REPLICA' ELSE 'ALWAYS' END, want.name);
		END IF;
	END LOOP;
	IF rel.relispartition THEN
		-- The clones: the replica check on for replica sessions, the
		-- catch-all row check on everywhere. On a partitioned partition
		-- it is the template of its future partitions; on a leaf it is
		-- what checks a row that MERGE moves to another partition: the
		-- move is a DELETE on one leaf and an INSERT on another, which
		-- fire row triggers there but no statement trigger, and
		-- PostgreSQL 15 leaves the moved row out of the target table's
		-- UPDATE transition tables under MERGE.
		FOR trg IN SELECT t.tgname, t.tgenabled FROM pg_trigger t
		           WHERE t.tgrelid = tbl AND t.tgname IN ('fencegate_replica', 'fencegate_row') LOOP
			IF trg.tgname = 'fencegate_replica' THEN
				IF trg.tgenabled <> 'R' THEN
					EXECUTE format('ALTER TABLE ONLY %s ENABLE REPLICA TRIGGER fencegate_replica', tbl);
				END IF;
			ELSIF trg.tgenabled <> 'A' THEN
				EXECUTE format('ALTER TABLE ONLY %s ENABLE ALWAYS TRIGGER fencegate_row', tbl);
			END IF;
		END LOOP;
	END IF;
END
$fg$;

-- check_expression refuses a resource expression, already stored as the
-- generated column fencegate_resource of table probe, whose result could
-- change after protect ran: one that reaches a function, operator, type or
-- collation outside pg_catalog or not owned by the bootstrap superuser (an
-- application could replace it), a system column (its values change on dump
-- and restore), a function returning cstring (an output function), or that
-- turns into text a value whose text form depends on session settings:
-- floats (extra_float_digits), bytea (bytea_output), times (DateStyle),
-- geometric types, money, and intervals (IntervalStyle: PostgreSQL 14 takes
-- interval::text for immutable in a generated column, 15 and later refuse
-- it themselves). Such values may still be used through functions
-- whose result does not depend on settings (f::numeric, encode(b, 'hex'),
-- comparisons). PostgreSQL itself refuses volatile and stable functions in a
-- generated column (after inlining: 'order:' || id is immutable for an
-- integer id, and so allowed).
CREATE OR REPLACE FUNCTION fencegate.check_expression(probe regclass, tbl regclass) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	tree   text;
	bad    text;
	tok    text[];
	names  text[] := '{}';
	types  oid[] := '{}';
	funcs  oid[] := '{}';
	n      integer;
	field  text;
	unsafe oid[] := ARRAY['float4', 'float8', 'bytea', 'point', 'lseg', 'line', 'box', 'path', 'polygon', 'circle',
	                      'time', 'timetz', 'money', 'interval']::regtype[]::oid[];
	totext oid[] := ARRAY['textanycat(text, anynonarray)', 'anytextcat(anynonarray, text)']::regprocedure[]::oid[];
BEGIN
	SELECT d.adbin::text INTO tree FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
	WHERE d.adrelid = probe AND a.attname = 'fencegate_resource';
	IF tree IS NULL THEN
		RAISE EXCEPTION 'fencegate: internal error: no resource expression on %', probe;
	END IF;
	IF tree ~ ':varattno -[0-9]' THEN
		RAISE EXCEPTION 'fencegate: the resource expression for % uses a system column (tableoid, ctid, ...), whose values change when rows move or are restored', tbl
			USING ERRCODE = 'FG003', HINT = 'Use ordinary columns of the table.';
	END IF;
	SELECT format_type(y.oid, NULL) INTO bad
	FROM (SELECT DISTINCT x[2]::oid AS oid
	      FROM regexp_matches(tree, ':([A-Za-z_]*type|[A-Za-z_]*typid|typeId) ([0-9]+)', 'g') x) m
	     JOIN pg_type y ON y.oid = m.oid
	     LEFT JOIN pg_type e ON e.oid = y.typelem AND y.typsubscript = 'array_subscript_handler'::regproc
	WHERE NOT (y.typnamespace = 'pg_catalog'::regnamespace AND y.typowner = 10
	           AND (e.oid IS NULL OR (e.typnamespace = 'pg_catalog'::regnamespace AND e.typowner = 10)))
	LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'fencegate: the resource expression for % uses type %, which is not built in (its owner could change what its values mean)', tbl, bad
			USING ERRCODE = 'FG003', HINT = 'Use columns and values of the types of pg_catalog.';
	END IF;
	SELECT p.oid::regprocedure::text INTO bad
	FROM (SELECT DISTINCT x[2]::oid AS oid FROM regexp_matches(tree, ':(funcid|opfuncid|hashfuncid|negfuncid) ([0-9]+)', 'g') x) f
	     JOIN pg_proc p ON p.oid = f.oid
	WHERE f.oid <> 0 AND (p.pronamespace <> 'pg_catalog'::regnamespace OR p.proowner <> 10 OR p.prorettype = 'cstring'::regtype)
	LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'fencegate: the resource expression for % calls %, which is not a built-in function or is an output function', tbl, bad
			USING ERRCODE = 'FG003', HINT = 'Use only immutable functions and operators of pg_catalog.';
	END IF;
	SELECT o.oid::regoperator::text INTO bad
	FROM (SELECT DISTINCT x[1]::oid AS oid FROM regexp_matches(tree, ':opno ([0-9]+)', 'g') x) f
	     JOIN pg_operator o ON o.oid = f.oid
	WHERE o.oprnamespace <> 'pg_catalog'::regnamespace OR o.oprowner <> 10
	LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'fencegate: the resource expression for % uses operator %, which is not built in', tbl, bad
			USING ERRCODE = 'FG003', HINT = 'Use only operators of pg_catalog.';
	END IF;
	SELECT c.collname::text INTO bad
	FROM (SELECT DISTINCT x[2]::oid AS oid FROM regexp_matches(tree, ':([a-z]*coll[a-zA-Z]*) ([0-9]+)', 'g') x) f
	     JOIN pg_collation c ON c.oid = f.oid
	WHERE c.collnamespace <> 'pg_catalog'::regnamespace OR c.collowner <> 10
	LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'fencegate: the resource expression for % uses collation %, which is not built in', tbl, bad
			USING ERRCODE = 'FG003', HINT = 'Use only collations of pg_catalog.';
	END IF;
	-- Walk the node tree: a value of a settings-dependent type may flow into
	-- any node but an I/O conversion or a text concatenation.
	FOR tok IN SELECT regexp_matches(tree, '(\{[A-Z_]+|\}|:[A-Za-z_]+ -?[0-9]+)', 'g') LOOP
		IF left(tok[1], 1) = '{' THEN
			names := names || substr(tok[1], 2);
			types := types || 0::oid;
			funcs := funcs || 0::oid;
		ELSIF tok[1] = '}' THEN
			n := cardinality(names);
			IF n > 1 AND (types[n] = ANY (unsafe) OR (SELECT y.typelem FROM pg_type y WHERE y.oid = types[n]) = ANY (unsafe))
			   AND (names[n - 1] = 'COERCEVIAIO' OR funcs[n - 1] = ANY (totext)) THEN
				RAISE EXCEPTION 'fencegate: the resource expression for % turns a value of type % into text, and that text depends on session settings (extra_float_digits, bytea_output, DateStyle, IntervalStyle)', tbl, format_type(types[n], NULL)
					USING ERRCODE = 'FG003',
					HINT = 'Convert the value explicitly first: col::numeric for floats, encode(col, ''hex'') for bytea, extract(...) for times.';
			END IF;
			names := names[1:n - 1];
			types := types[1:n - 1];
			funcs := funcs[1:n - 1];
		ELSE
			n := cardinality(names);
			field := split_part(tok[1], ' ', 1);
			IF n > 0 AND types[n] = 0 AND field IN (':vartype', ':consttype', ':paramtype', ':opresulttype', ':funcresulttype', ':resulttype',
			                                        ':casetype', ':coalescetype', ':minmaxtype', ':array_typeid', ':row_typeid', ':typeId', ':type', ':refrestype') THEN
				types[n] := split_part(tok[1], ' ', 2)::oid;
			ELSIF n > 0 AND field IN (':funcid', ':opfuncid') THEN
				funcs[n] := split_part(tok[1], ' ', 2)::oid;
			END IF;
		END IF;
	END LOOP;
	-- Backstop: whatever PostgreSQL recorded as a dependency of the
	-- expression, other than the table's own columns (built-in objects are
	-- pinned and never recorded).
	SELECT pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid) INTO bad
	FROM pg_depend d
	WHERE ((d.classid = 'pg_attrdef'::regclass AND d.objid IN (SELECT ad.oid FROM pg_attrdef ad JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
	                                                          WHERE ad.adrelid = probe AND a.attname = 'fencegate_resource'))
	       OR (d.classid = 'pg_class'::regclass AND d.objid = probe AND d.objsubid = (SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = probe AND a.attname = 'fencegate_resource')))
	  AND NOT (d.refclassid = 'pg_class'::regclass AND d.refobjid = probe)
	  AND NOT (d.refclassid = 'pg_collation'::regclass AND d.refobjid = 'pg_catalog."C"'::regcollation)
	LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'fencegate: the resource expression for % depends on %, which is not built in', tbl, bad
			USING ERRCODE = 'FG003', HINT = 'Use only immutable functions, operators and types of pg_catalog.';
	END IF;
END
$fg$;

-- protect guards a table: from now on every write to one of its rows needs
-- a standing fence, in the same transaction, on the row's resource, which the
-- SQL expression resource computes from the row's columns. It covers the
-- table's partitions and inheritance children, present and future. A second
-- call replaces the expression (one transaction: the old checks stand until
-- it commits). It runs as the caller, who must own the table.
CREATE OR REPLACE FUNCTION fencegate.protect(tbl regclass, resource text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	rel     record;
	anc     regclass;
	col     record;
	probe   text := 'fencegate_probe_' || pg_backend_pid();
	probeid regclass;
	newexpr text;
	oldexpr text;
	kid     record;
	n       bigint;
BEGIN
	IF tbl IS NULL THEN
		RAISE EXCEPTION 'fencegate: protect needs a table' USING ERRCODE = 'FG003';
	END IF;
	IF resource IS NULL OR btrim(resource) = '' THEN
		RAISE EXCEPTION 'fencegate: protect % needs a resource expression, e.g. $$''order:'' || id$$', tbl
			USING ERRCODE = 'FG003';
	END IF;
	SELECT c.relkind, c.relpersistence, c.relispartition, n.nspname, c.relowner INTO rel
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
	IF rel.relkind NOT IN ('r', 'p') THEN
		RAISE EXCEPTION 'fencegate: % is a %, not a table; protect the table it writes to', tbl,
			CASE rel.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'f' THEN 'foreign table'
			                 WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' WHEN 'I' THEN 'index' ELSE 'relation of kind ' || rel.relkind::text END
			USING ERRCODE = 'FG003';
	END IF;
	IF rel.relpersistence = 't' THEN
		RAISE EXCEPTION 'fencegate: % is a temporary table; only permanent tables can be protected', tbl USING ERRCODE = 'FG003';
	END IF;
	IF rel.nspname IN ('fencegate', 'pg_catalog', 'information_schema') OR rel.nspname LIKE 'pg\_toast%' THEN
		RAISE EXCEPTION 'fencegate: % is a system or fencegate table and cannot be protected', tbl USING ERRCODE = 'FG003';
	END IF;
	SELECT i.inhparent::regclass INTO anc FROM pg_inherits i WHERE i.inhrelid = tbl LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'fencegate: % is a partition or inheritance child of %; protect the topmost table instead (it covers all its partitions and children)', tbl, anc
			USING ERRCODE = 'FG003';
	END IF;
	SELECT a.attgenerated, a.atttypid, a.attcollation INTO col FROM pg_attribute a
	WHERE a.attrelid = tbl AND a.attname = 'fencegate_resource' AND NOT a.attisdropped;
	IF FOUND AND NOT (col.attgenerated = 's' AND col.atttypid = 'text'::regtype AND col.attcollation = 'pg_catalog."C"'::regcollation) THEN
		RAISE EXCEPTION 'fencegate: % already has a column fencegate_resource that fencegate did not create', tbl
			USING ERRCODE = 'FG003', HINT = 'Rename that column; fencegate keeps each row''s resource in it.';
	END IF;

	-- Try the expression on an empty copy of the table first: a refused
	-- expression costs no rewrite of the real table.
	EXECUTE format('CREATE TEMP TABLE %I (LIKE %s) ON COMMIT DROP', probe, tbl);
	probeid := format('pg_temp.%I', probe)::regclass;
	IF EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = probeid AND a.attname = 'fencegate_resource' AND NOT a.attisdropped) THEN
		EXECUTE format('ALTER TABLE %s DROP COLUMN fencegate_resource', probeid);
	END IF;
	BEGIN
		EXECUTE format('ALTER TABLE %s ADD COLUMN fencegate_resource text COLLATE "C" GENERATED ALWAYS AS (%s) STORED', probeid, resource);
	EXCEPTION WHEN OTHERS THEN
		RAISE EXCEPTION 'fencegate: the resource expression % for % is not usable: %', resource, tbl,
			CASE SQLSTATE WHEN '42P17' THEN 'it is not immutable (it calls a function whose result can change, or converts a value whose text form depends on session settings)' ELSE SQLERRM END
			USING ERRCODE = SQLSTATE, HINT = 'Write an SQL expression over the table''s columns, e.g. $$''order:'' || id$$; a constant such as $$''ledger''$$ makes the whole table one resource.';
	END;
	PERFORM fencegate.check_expression(probeid, tbl);
	newexpr := pg_get_expr((SELECT d.adbin FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
	                        WHERE d.adrelid = probeid AND a.attname = 'fencegate_resource'), probeid);
	EXECUTE format('DROP TABLE %s', probeid);

	oldexpr := pg_get_expr((SELECT d.adbin FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
	                        WHERE d.adrelid = tbl AND a.attname = 'fencegate_resource' AND NOT a.attisdropped), tbl);
	IF oldexpr IS DISTINCT FROM newexpr THEN
		IF oldexpr IS NOT NULL THEN
			-- fencegate_move's WHEN condition reads the column: the
			-- trigger goes with it, and shape puts it back below.
			FOR kid IN SELECT g.tgrelid::regclass AS relid FROM fencegate.tree(tbl) t JOIN pg_trigger g ON g.tgrelid = t.relid AND g.tgname = 'fencegate_move' LOOP
				EXECUTE format('DROP TRIGGER fencegate_move ON %s', kid.relid);
			END LOOP;
			EXECUTE format('ALTER TABLE %s DROP COLUMN fencegate_resource', tbl);
		END IF;
		EXECUTE format('ALTER TABLE %s ADD COLUMN fencegate_resource text COLLATE "C" GENERATED ALWAYS AS (%s) STORED', tbl, resource);
		EXECUTE format('SELECT count(*) FROM %s WHERE fencegate_resource IS NULL OR fencegate_resource = ''''', tbl) INTO n;
		IF n > 0 THEN
			RAISE WARNING 'fencegate: % rows of % have no resource (the expression yields NULL or an empty string); writes to them will be refused', n, tbl;
		END IF;
	END IF;
	-- Every table of the hierarchy must compute the same resources.
	SELECT t.relid INTO anc FROM fencegate.tree(tbl) t
	WHERE pg_get_expr((SELECT d.adbin FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
	                   WHERE d.adrelid = t.relid AND a.attname = 'fencegate_resource' AND NOT a.attisdropped), t.relid) IS DISTINCT FROM newexpr
	LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'fencegate: % computes its resource differently from %', anc, tbl
			USING ERRCODE = 'FG003', HINT = 'Give the child the parent''s fencegate_resource column, or detach it.';
	END IF;
	FOR kid IN SELECT t.relid, c.relowner, r.rolname, r.rolcanlogin
	           FROM fencegate.tree(tbl) t JOIN pg_class c ON c.oid = t.relid JOIN pg_roles r ON r.oid = c.relowner
	           ORDER BY t.depth
	LOOP
		PERFORM fencegate.shape(kid.relid);
		-- Writes that PostgreSQL runs as the table's owner (foreign-key
		-- cascades) are checked as the owner, who must read the marks; and
		-- a partition its owner creates gets a clone of the row-level check,
		-- which needs EXECUTE on it (the function runs as the writer, so
		-- the grant gives nothing away).
		IF NOT has_table_privilege(kid.relowner, 'fencegate.marks', 'SELECT') THEN
			EXECUTE format('GRANT USAGE ON SCHEMA fencegate TO %I', kid.rolname);
			EXECUTE format('GRANT SELECT ON fencegate.marks TO %I', kid.rolname);
		END IF;
		IF NOT has_function_privilege(kid.relowner, 'fencegate.check_row()', 'EXECUTE') THEN
			EXECUTE format('GRANT EXECUTE ON FUNCTION fencegate.check_row() TO %I', kid.rolname);
		END IF;
		IF kid.rolcanlogin THEN
			RAISE WARNING 'fencegate: % is owned by role %, which can log in: an owner can drop or disable the checks and rewrite rows without them', kid.relid, kid.rolname
				USING HINT = 'Give protected tables to a role that cannot log in (ALTER TABLE ... OWNER TO ...), and install the DDL guard (fencegate schema install --guard-ddl).';
		END IF;
	END LOOP;
END
$fg$;

-- unprotect removes the checks and the resource column from a protected
-- table and all its partitions and children.
CREATE OR REPLACE FUNCTION fencegate.unprotect(tbl regclass) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	anc regclass;
	kid record;
	trg record;
BEGIN
	IF tbl IS NULL THEN
		RAISE EXCEPTION 'fencegate: unprotect needs a table' USING ERRCODE = 'FG003';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = tbl AND t.tgname = 'fencegate_ins') THEN
		RAISE EXCEPTION 'fencegate: % is not protected', tbl USING ERRCODE = 'FG003';
	END IF;
	SELECT i.inhparent::regclass INTO anc FROM pg_inherits i WHERE i.inhrelid = tbl LIMIT 1;
	IF FOUND AND EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = anc AND t.tgname = 'fencegate_ins') THEN
		RAISE EXCEPTION 'fencegate: % is protected as part of %; unprotect that table', tbl, anc USING ERRCODE = 'FG003';
	END IF;
	FOR kid IN SELECT t.relid FROM fencegate.tree(tbl) t ORDER BY t.depth LOOP
		FOR trg IN SELECT t.tgname FROM pg_trigger t
		           WHERE t.tgrelid = kid.relid AND t.tgparentid = 0
		             AND t.tgname IN ('fencegate_ins', 'fencegate_upd', 'fencegate_move', 'fencegate_del', 'fencegate_trunc', 'fencegate_replica', 'fencegate_row') LOOP
			EXECUTE format('DROP TRIGGER %I ON %s', trg.tgname, kid.relid);
		END LOOP;
	END LOOP;
	IF EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = 'fencegate_resource' AND NOT a.attisdropped) THEN
		EXECUTE format('ALTER TABLE %s DROP COLUMN fencegate_resource', tbl);
	END IF;
END
$fg$;

-- set_mark sets a resource's mark to any token, lower included, and records
-- who did it, when and why. It is the only way a mark goes down.
CREATE OR REPLACE FUNCTION fencegate.set_mark(resource text, token bigint, reason text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fg$
#variable_conflict use_column
DECLARE
	old bigint;
BEGIN
	IF set_mark.resource IS NULL OR set_mark.resource = '' THEN
		RAISE EXCEPTION 'fencegate: set_mark needs a non-empty resource name' USING ERRCODE = 'FG003';
	END IF;
	IF set_mark.token IS NULL OR set_mark.token < 0 THEN
		RAISE EXCEPTION 'fencegate: set_mark for resource % needs a non-negative token, got %', quote_literal(set_mark.resource), coalesce(set_mark.token::text, 'NULL')
			USING ERRCODE = 'FG003';
	END IF;
	SELECT m.token INTO old FROM fencegate.marks m WHERE m.resource = set_mark.resource FOR UPDATE;
	INSERT INTO fencegate.marks AS m (resource, token, updated_at, holder_xid, holder_boot)
	VALUES (set_mark.resource, set_mark.token, now(), NULL, NULL)
	ON CONFLICT (resource) DO UPDATE
		SET token = EXCLUDED.token, updated_at = EXCLUDED.updated_at, holder_xid = NULL, holder_boot = NULL;
	INSERT INTO fencegate.audit (by_session, by_role, resource, old_token, new_token, reason)
	VALUES (session_user, current_user, set_mark.resource, old, set_mark.token, nullif(set_mark.reason, ''));
	RETURN old;
END
$fg$;

-- prune_batch raises the floor to floor (it never lowers it), then deletes
-- at most batch marks (NULL: all) at or below the floor, in resource order
-- from the first resource after after (NULL: from the start), skipping marks
-- that a running transaction holds locked (a fence in progress: it reads
-- the floor after its upsert), and the audit rows of the resources it
-- deleted whose tokens are all at or below the floor. Prunes raise the
-- floor one at a time, under a transaction advisory lock keyed by the
-- floor's oid; the floor goes up before any mark is deleted. It returns how
-- many marks it deleted and the last resource deleted (NULL when none: the
-- walk is over). It runs as the caller, who needs the owner role's rights:
-- no application role may execute it (pgfence/DESIGN.md, "Pruning marks").
CREATE OR REPLACE FUNCTION fencegate.prune_batch(floor bigint, after text, batch integer) RETURNS TABLE(deleted bigint, last_resource text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $fg$
#variable_conflict use_column
DECLARE
	cur  bigint;
	gone text[];
BEGIN
	IF prune_batch.floor IS NULL OR prune_batch.floor < 0 THEN
		RAISE EXCEPTION 'fencegate: prune needs a non-negative floor, got %', coalesce(prune_batch.floor::text, 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Pass the token at or below which marks go: every resource without a mark then refuses tokens at or below it.';
	END IF;
	IF prune_batch.batch IS NOT NULL AND prune_batch.batch < 1 THEN
		RAISE EXCEPTION 'fencegate: prune needs a batch of at least 1 mark, got %', prune_batch.batch
			USING ERRCODE = 'FG003';
	END IF;
	PERFORM pg_advisory_xact_lock('fencegate.floor'::regclass::oid::bigint);
	SELECT f.last_value INTO cur FROM fencegate.floor f;
	IF prune_batch.floor > cur THEN
		PERFORM setval('fencegate.floor'::regclass, prune_batch.floor, true);
		cur := prune_batch.floor;
	END IF;
	WITH victims AS (
		SELECT m.resource FROM fencegate.marks m
		WHERE m.resource > coalesce(prune_batch.after, '') AND m.token <= cur
		ORDER BY m.resource
		LIMIT prune_batch.batch
		FOR UPDATE SKIP LOCKED),
	d AS (
		DELETE FROM fencegate.marks m USING victims v
		WHERE m.resource = v.resource AND m.token <= cur
		RETURNING m.resource)
	SELECT array_agg(d.resource ORDER BY d.resource) INTO gone FROM d;
	IF gone IS NULL THEN
		RETURN QUERY SELECT 0::bigint, NULL::text;
		RETURN;
	END IF;
	DELETE FROM fencegate.audit a
	WHERE a.resource = ANY (gone) AND a.new_token <= cur AND coalesce(a.old_token, 0) <= cur;
	RETURN QUERY SELECT cardinality(gone)::bigint, gone[cardinality(gone)];
END
$fg$;

-- prune is prune_batch in one call and one transaction: it raises the floor
-- and deletes every mark at or below it that no running transaction holds
-- locked, and returns how many it deleted. A fence on a resource whose mark
-- it deletes waits until the call commits; "fencegate marks prune" deletes
-- in batches of its own transactions instead.
CREATE OR REPLACE FUNCTION fencegate.prune(floor bigint) RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fg$SELECT p.deleted FROM fencegate.prune_batch(prune.floor, NULL, NULL) p$fg$;

-- effects is the fenced outbox (version 6): each row is a call to another
-- system that a fenced transaction asked for (fencegate.effect), to be
-- made by a relay once that transaction has committed. Only the owner role
-- reads or writes it; applications add rows through fencegate.effect,
-- relays claim and settle them through the effect_* functions below. The
-- id is taken from its identity sequence (CACHE 1) inside fencegate.effect,
-- while the writing transaction holds its resource's fence, that is the
-- lock on the resource's mark: so among the effects of one resource, id
-- order is the order in which their transactions committed
-- (pgfence/DESIGN.md, "Effects"). idem_key is random per effect: it is the
-- Idempotency-Key of every attempt, unique across databases and restores.
CREATE TABLE IF NOT EXISTS fencegate.effects (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	resource   text COLLATE "C" NOT NULL,
	token      bigint NOT NULL,
	target     text COLLATE "C" NOT NULL,
	payload    jsonb NOT NULL,
	idem_key   uuid NOT NULL,
	state      text COLLATE "C" NOT NULL DEFAULT 'pending',
	pending    boolean NOT NULL DEFAULT true,
	created_at timestamptz NOT NULL DEFAULT now(),
	attempts   integer NOT NULL DEFAULT 0,
	next_at    timestamptz NOT NULL DEFAULT '-infinity',
	status     integer,
	response   text,
	last_error text,
	done_at    timestamptz
);
-- The id's sequence must hand out values one at a time (CACHE 1), in
-- steps of 1, without cycling: per resource, id order is commit order only
-- because each nextval sees every earlier one (pgfence/DESIGN.md, "Effects").
DO $do$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_sequence s
	               WHERE s.seqrelid = 'fencegate.effects_id_seq'::pg_catalog.regclass
	                 AND s.seqincrement = 1 AND s.seqcache = 1 AND NOT s.seqcycle) THEN
		ALTER SEQUENCE fencegate.effects_id_seq INCREMENT 1 CACHE 1 NO CYCLE;
	END IF;
END
$do$;
-- state is one of pending, delivered, failed, dropped; pending says
-- state = 'pending', for the partial index (its predicate uses no operator:
-- the inventory prints an operator schema-qualified under a search_path that
-- shadows it, and would report a false alarm).
CREATE INDEX IF NOT EXISTS effects_pending ON fencegate.effects (resource, id) WHERE pending;
CREATE INDEX IF NOT EXISTS effects_done ON fencegate.effects (done_at);
COMMENT ON TABLE fencegate.effects IS 'fencegate: calls to other systems that fenced transactions committed, for a relay to deliver (fencegate.effect)';

-- effect records, in the calling transaction, that payload is to be POSTed
-- to the relay's target named target once the transaction commits, and
-- returns the effect's id. Like a write to a protected table it needs a
-- standing fence on resource taken by this very transaction (FG002); the
-- fence already refused a stale token (FG001), and the floor is read again
-- here. It runs as the owner role, which alone may write the effects.
CREATE OR REPLACE FUNCTION fencegate.effect(resource text, target text, payload jsonb) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fg$
#variable_conflict use_column
DECLARE
	tok bigint;
	flr bigint;
	eid bigint;
BEGIN
	IF effect.resource IS NULL OR effect.resource = '' OR octet_length(convert_to(effect.resource, 'UTF8')) > 1024 THEN
		RAISE EXCEPTION 'fencegate: effect needs a resource name of 1 to 1024 bytes (UTF-8), the one the lock was taken on'
			USING ERRCODE = 'FG003',
			HINT = 'Call SELECT fencegate.effect(resource, target, payload) after SELECT fencegate.fence(resource, token) in the same transaction.';
	END IF;
	IF effect.target IS NULL OR effect.target COLLATE "C" !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$' THEN
		RAISE EXCEPTION 'fencegate: effect target % is not a target name: 1 to 63 letters, digits, ".", "_" or "-", starting with a letter or digit', coalesce(quote_literal(effect.target), 'NULL')
			USING ERRCODE = 'FG003',
			HINT = 'Use a name the relay was started with (fencegate relay --target NAME=URL).';
	END IF;
	IF effect.payload IS NULL OR octet_length(effect.payload::text) > 1048576 THEN
		RAISE EXCEPTION 'fencegate: effect payload for target % must be a JSON value of at most 1 MiB', effect.target
			USING ERRCODE = 'FG003',
			HINT = 'Pass the request body as jsonb; keep large documents elsewhere and send their reference.';
	END IF;
	SELECT m.token INTO tok FROM fencegate.marks m
	WHERE m.resource = effect.resource AND m.holder_xid = pg_current_xact_id() AND m.holder_boot = pg_postmaster_start_time();
	IF NOT FOUND THEN
		RAISE EXCEPTION 'fencegate: effect refused: this transaction holds no fence on resource %', quote_literal(effect.resource)
			USING ERRCODE = 'FG002',
			HINT = format('Take the lock on %s, then run SELECT fencegate.fence(%s, token) in this transaction before recording an effect.', quote_literal(effect.resource), quote_literal(effect.resource));
	END IF;
	SELECT f.last_value INTO flr FROM fencegate.floor f;
	IF tok <= flr THEN
		RAISE EXCEPTION 'fencegate: stale token % for resource %: marks at or below % were pruned (floor %)', tok, quote_literal(effect.resource), flr, flr
			USING ERRCODE = 'FG001',
			HINT = 'Tokens at or below the floor are refused for every resource; this holder must not act.';
	END IF;
	INSERT INTO fencegate.effects (resource, token, target, payload, idem_key)
	VALUES (effect.resource, tok, effect.target, effect.payload, gen_random_uuid())
	RETURNING id INTO eid;
	PERFORM pg_notify('fencegate_effects', effect.target);
	RETURN eid;
END
$fg$;

-- effect_claim locks, in the calling transaction, at most batch effects that
-- are due, each the oldest pending effect of its resource (found by a skip
-- scan of effects_pending: one index probe per resource with pending
-- effects, however many each has), whose target is
-- one of targets, skipping those another transaction holds (another relay
-- delivering them), and returns them. The locks last until the caller's
-- transaction ends: the relay delivers, settles each with effect_record and
-- commits; a relay that dies releases them with its connection.
CREATE OR REPLACE FUNCTION fencegate.effect_claim(targets text[], batch integer) RETURNS TABLE(id bigint, resource text, token bigint, target text, payload jsonb, idem_key uuid, attempts integer, created_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fg$
#variable_conflict use_column
BEGIN
	RETURN QUERY
	SELECT e.id, e.resource::text, e.token, e.target::text, e.payload, e.idem_key, e.attempts, e.created_at
	FROM fencegate.effects e
	WHERE e.id IN (WITH RECURSIVE heads(resource, id) AS (
	                   (SELECT p.resource, p.id FROM fencegate.effects p WHERE p.pending ORDER BY p.resource, p.id LIMIT 1)
	                   UNION ALL
	                   SELECT n.resource, n.id FROM heads h, LATERAL (
	                       SELECT p.resource, p.id FROM fencegate.effects p
	                       WHERE p.pending AND p.resource > h.resource ORDER BY p.resource, p.id LIMIT 1) n)
	               SELECT h.id FROM heads h)
	  AND e.pending AND e.target = ANY (effect_claim.targets) AND e.next_at <= clock_timestamp()
	ORDER BY e.id
	LIMIT greatest(coalesce(effect_claim.batch, 1), 1)
	FOR UPDATE OF e SKIP LOCKED;
END
$fg$;

-- effect_record settles one attempt of an effect the calling transaction
-- claimed: outcome 'delivered' or 'failed' ends it, 'retry' leaves it
-- pending until retry_at. It counts the attempt and keeps the response.
CREATE OR REPLACE FUNCTION fencegate.effect_record(id bigint, outcome text, status integer, response text, error text, retry_at timestamp with time zone) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $fg$
#variable_conflict use_column
DECLARE
	n bigint;
BEGIN
	IF effect_record.outcome IS NULL OR effect_record.outcome NOT IN ('delivered', 'failed', 'retry') THEN
		RAISE EXCEPTION 'fencegate: effect_record needs outcome delivered, failed or retry, got %', coalesce(quote_literal(effect_record.outcome), 'NULL')
			USING ERRCODE = 'FG003';
	END IF;
	-- Held by this transaction (effect_claim): taken again at once. Held by
	-- another: refused, never waited for.
	PERFORM 1 FROM fencegate.effects e WHERE e.id = effect_record.id FOR UPDATE NOWAIT;
	UPDATE fencegate.effects e
	SET attempts = e.attempts + 1,
	    state = CASE effect_record.outcome WHEN 'retry' THEN 'pending' ELSE effect_record.outcome END,
	    pending = effect_record.outcome = 'retry',
	    status = effect_record.status,
	    response = left(effect_record.response, 4096),
	    last_error = left(effect_record.error, 1024),
	    next_at = CASE WHEN effect_record.outcome = 'retry' THEN coalesce(effect_record.retry_at, clock_timestamp()) ELSE e.next_at END,
	    done_at = CASE WHEN effect_record.outcome = 'retry' THEN NULL ELSE clock_timestamp() END
	WHERE e.id = effect_record.id AND e.pending;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n = 1;
END
$fg$;

-- effect_stats counts the effects for a relay's metrics: pending, failed,
-- and the creation time of the oldest pending one.
CREATE OR REPLACE FUNCTION fencegate.effect_stats() RETURNS TABLE(pending bigint, failed bigint, oldest_pending timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fg$
SELECT count(*) FILTER (WHERE e.state = 'pending'), count(*) FILTER (WHERE e.state = 'failed'),
       min(e.created_at) FILTER (WHERE e.state = 'pending')
FROM fencegate.effects e WHERE e.state IN ('pending', 'failed')
$fg$;

-- effect_prune deletes at most batch delivered and dropped effects settled
-- more than retain ago, and returns how many it deleted. Pending and failed
-- effects stay.
CREATE OR REPLACE FUNCTION fencegate.effect_prune(retain interval, batch integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fg$
#variable_conflict use_column
DECLARE
	n bigint;
BEGIN
	IF effect_prune.retain IS NULL OR effect_prune.retain < interval '0' THEN
		RAISE EXCEPTION 'fencegate: effect_prune needs a non-negative retention' USING ERRCODE = 'FG003';
	END IF;
	DELETE FROM fencegate.effects e WHERE e.id IN (
		SELECT d.id FROM fencegate.effects d
		WHERE d.state IN ('delivered', 'dropped') AND d.done_at < clock_timestamp() - effect_prune.retain
		ORDER BY d.done_at LIMIT greatest(coalesce(effect_prune.batch, 1000), 1)
		FOR UPDATE SKIP LOCKED);
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$fg$;

-- protected lists every protected table: the table protect was called on
-- (root) and each of its partitions and children, with the resource
-- expression and whether the table has its statement-level checks (a new
-- partition is checked row by row until protect runs again).
CREATE OR REPLACE VIEW fencegate.protected AS
SELECT c.oid::regclass AS tbl,
       pg_get_expr(d.adbin, d.adrelid) AS resource,
       (SELECT t.tgrelid::regclass FROM pg_trigger t
        WHERE t.tgfoid = 'fencegate.check_insert()'::regprocedure AND t.tgrelid IN (
        	WITH RECURSIVE up(relid) AS (SELECT c.oid UNION ALL SELECT i.inhparent FROM up JOIN pg_inherits i ON i.inhrelid = up.relid)
        	SELECT up.relid FROM up)
          AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_trigger pt ON pt.tgrelid = i.inhparent AND pt.tgfoid = 'fencegate.check_insert()'::regprocedure
                          WHERE i.inhrelid = t.tgrelid)) AS root,
       EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgfoid = 'fencegate.check_insert()'::regprocedure) AS statement_checks
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'fencegate_resource' AND a.attgenerated = 's' AND NOT a.attisdropped
JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
  AND EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid
              AND t.tgfoid IN ('fencegate.check_insert()'::regprocedure, 'fencegate.check_row()'::regprocedure));
COMMENT ON VIEW fencegate.protected IS 'fencegate: protected tables, their resource expression and the table protect was called on';
