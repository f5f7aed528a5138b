-- The DDL guard (fencegate schema install --guard-ddl): event triggers that
-- refuse DDL on protected tables, on their triggers, rules and columns, and on
-- the types of their columns, by roles outside the fencegate owner role; and
-- that give partitions and inheritance children created or attached later
-- their statement-level checks. Install.go runs this file as a superuser
-- (event triggers need one); the functions stay owned by that superuser so
-- that the owner role cannot change code that runs for every DDL command.

-- The guard functions call no other function of schema fencegate: every
-- role that runs DDL runs them, and most have no rights in the schema.

CREATE OR REPLACE FUNCTION fencegate.guard_ddl() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	owner  oid;
	member boolean;
	cmd    record;
	rel    regclass;
	kid    record;
BEGIN
	SELECT n.nspowner INTO owner FROM pg_namespace n WHERE n.nspname = 'fencegate';
	IF owner IS NULL THEN
		RETURN;
	END IF;
	member := pg_has_role(current_user, owner, 'MEMBER');
	IF NOT member THEN
		FOR cmd IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
			-- The table the command touched: itself, or the table of a
			-- trigger, rule, default, constraint, policy or index; refused
			-- when it or an ancestor carries fencegate's checks.
			SELECT x.relid::regclass INTO rel
			FROM (SELECT CASE cmd.classid
				WHEN 'pg_class'::regclass THEN coalesce((SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = cmd.objid), cmd.objid)
				WHEN 'pg_trigger'::regclass THEN (SELECT t.tgrelid FROM pg_trigger t WHERE t.oid = cmd.objid)
				WHEN 'pg_rewrite'::regclass THEN (SELECT r.ev_class FROM pg_rewrite r WHERE r.oid = cmd.objid)
				WHEN 'pg_attrdef'::regclass THEN (SELECT d.adrelid FROM pg_attrdef d WHERE d.oid = cmd.objid)
				WHEN 'pg_constraint'::regclass THEN (SELECT c.conrelid FROM pg_constraint c WHERE c.oid = cmd.objid)
				WHEN 'pg_policy'::regclass THEN (SELECT p.polrelid FROM pg_policy p WHERE p.oid = cmd.objid)
				END AS relid) x
			WHERE x.relid IS NOT NULL AND EXISTS (
				WITH RECURSIVE up(relid) AS (
					SELECT x.relid
					UNION
					SELECT i.inhparent FROM up JOIN pg_inherits i ON i.inhrelid = up.relid)
				SELECT 1 FROM up JOIN pg_trigger t ON t.tgrelid = up.relid JOIN pg_proc p ON p.oid = t.tgfoid
				WHERE p.pronamespace = 'fencegate'::regnamespace);
			IF rel IS NOT NULL THEN
				RAISE EXCEPTION 'fencegate: % on protected table % refused: role % is not a member of the fencegate owner role', cmd.command_tag, rel, current_user
					USING ERRCODE = 'FG006',
					HINT = 'Change protected tables as a member of the role that owns schema fencegate.';
			END IF;
			-- A type (or a cast of one) that a protected table's column
			-- has, directly, through a domain or as an array element.
			IF cmd.classid IN ('pg_type'::regclass, 'pg_cast'::regclass) THEN
				WITH RECURSIVE users(t) AS (
					SELECT cmd.objid WHERE cmd.classid = 'pg_type'::regclass
					UNION
					SELECT c.castsource FROM pg_cast c WHERE cmd.classid = 'pg_cast'::regclass AND c.oid = cmd.objid
					UNION
					SELECT c.casttarget FROM pg_cast c WHERE cmd.classid = 'pg_cast'::regclass AND c.oid = cmd.objid
					UNION
					SELECT y.oid FROM users JOIN pg_type y ON y.typbasetype = users.t OR y.typelem = users.t)
				SELECT a.attrelid::regclass INTO rel FROM pg_attribute a JOIN users ON a.atttypid = users.t
				WHERE NOT a.attisdropped AND a.attnum > 0
				  AND EXISTS (SELECT 1 FROM pg_trigger tr JOIN pg_proc p ON p.oid = tr.tgfoid
				              WHERE tr.tgrelid = a.attrelid AND p.pronamespace = 'fencegate'::regnamespace)
				LIMIT 1;
				IF rel IS NOT NULL THEN
					RAISE EXCEPTION 'fencegate: % on a type used by protected table % refused: role % is not a member of the fencegate owner role', cmd.command_tag, rel, current_user
						USING ERRCODE = 'FG006',
						HINT = 'Change the types of protected tables as a member of the role that owns schema fencegate.';
				END IF;
			END IF;
		END LOOP;
		RETURN;
	END IF;
	-- A member of the owner role (or a superuser) may change protected
	-- tables. Partitions and children it created or attached get their
	-- statement-level checks now (a new partition already has the cloned
	-- row-level check; an inheritance child has nothing until this runs).
	IF current_setting('fencegate.guard_shaping', true) = 'on' THEN
		RETURN;
	END IF;
	PERFORM set_config('fencegate.guard_shaping', 'on', true);
	FOR kid IN
		WITH roots AS (
			SELECT DISTINCT t.tgrelid AS relid FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
			WHERE t.tgfoid = 'fencegate.check_insert()'::regprocedure AND t.tgparentid = 0 AND c.relpersistence <> 't'
			  AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_trigger pt ON pt.tgrelid = i.inhparent AND pt.tgfoid = t.tgfoid
			                  WHERE i.inhrelid = t.tgrelid))
		SELECT k.relid FROM roots r, fencegate.tree(r.relid::regclass) k
		WHERE NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = k.relid AND t.tgname = 'fencegate_ins'
		                  AND t.tgfoid = 'fencegate.check_insert()'::regprocedure)
		ORDER BY k.depth
	LOOP
		PERFORM fencegate.shape(kid.relid);
	END LOOP;
	PERFORM set_config('fencegate.guard_shaping', '', true);
END
$fg$;

CREATE OR REPLACE FUNCTION fencegate.guard_drop() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fg$
DECLARE
	owner oid;
	obj   record;
BEGIN
	SELECT n.nspowner INTO owner FROM pg_namespace n WHERE n.nspname = 'fencegate';
	IF owner IS NULL OR pg_has_role(current_user, owner, 'MEMBER') THEN
		RETURN;
	END IF;
	FOR obj IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
		IF (obj.object_type = 'trigger' AND starts_with(obj.address_names[cardinality(obj.address_names)], 'fencegate_'))
		   OR (obj.object_type = 'table column' AND obj.address_names[3] = 'fencegate_resource')
		   OR (obj.object_type = 'table column' AND EXISTS (
		          SELECT 1 FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
		          WHERE t.tgrelid = to_regclass(quote_ident(obj.address_names[1]) || '.' || quote_ident(obj.address_names[2]))
		            AND p.pronamespace = 'fencegate'::regnamespace))
		   OR obj.schema_name = 'fencegate' THEN
			RAISE EXCEPTION 'fencegate: dropping % refused: role % is not a member of the fencegate owner role', obj.object_identity, current_user
				USING ERRCODE = 'FG006',
				HINT = 'Drop protected tables, their checks and fencegate objects as a member of the role that owns schema fencegate (fencegate unprotect first).';
		END IF;
	END LOOP;
END
$fg$;

DROP EVENT TRIGGER IF EXISTS fencegate_guard_ddl;
CREATE EVENT TRIGGER fencegate_guard_ddl ON ddl_command_end EXECUTE FUNCTION fencegate.guard_ddl();
ALTER EVENT TRIGGER fencegate_guard_ddl ENABLE ALWAYS;
DROP EVENT TRIGGER IF EXISTS fencegate_guard_drop;
CREATE EVENT TRIGGER fencegate_guard_drop ON sql_drop EXECUTE FUNCTION fencegate.guard_drop();
ALTER EVENT TRIGGER fencegate_guard_drop ENABLE ALWAYS;
