package pgfence

// HealthQuery is one plain SELECT, without parameters, that returns no rows
// when schema fencegate is installed at SchemaVersion and unaltered, and
// otherwise one text row per problem, each naming the command that repairs
// it. It reads only the system catalogs (readable by every role), so it runs
// on any database, with the schema or without, as any role, over the simple
// or the extended protocol.
//
// What it checks: the schema exists and belongs to a role that cannot log in;
// every function of the schema is there, unaltered (body, SECURITY DEFINER,
// pinned settings, owner, kind) and executable only by whom it should be
// (application roles: the fence functions and effect; relay roles: the
// effect_* functions; owners of protected tables: the row-level check their
// new partitions clone);
// there is no other function (an overload, an addition); the marks and the
// audit belong to the owner role, have the expected columns, no trigger, rule
// or row security, and grant nothing beyond SELECT; the floor sequence is
// there, unaltered (a permanent bigint sequence from 0 up, by 1, without
// cycling), and grants nothing to anyone; the effects table is there and
// grants nothing to anyone (applications and relays reach it only through
// functions); the signing keys belong
// to the owner role and grant nothing to anyone (a SELECT would let a role
// forge proofs); nothing else lives in the schema; every table of every protected hierarchy computes the root's
// resource expression and carries every check, enabled, the statement checks
// without a WHEN condition and fencegate_move with exactly its own, read from
// the stored node tree (printing it would lock the table); a protected table is
// not a partition or child of an unprotected one; the DDL guard, where
// installed, is whole and enabled.
//
// It finds fencegate's objects by identity (protectedRootsByIdentitySQL):
// tables named or triggers named like fencegate's, and temporary tables,
// never count. And it takes the inventory (InventoryQuery): every object in
// the schema or on its relations that sql/schema.sql does not create, and
// every one it creates that is missing, is a problem. The inventory prints
// definitions as PostgreSQL does under the search_path pg_catalog, pg_temp,
// which the gate and admin sessions pin; under a path that shadows built-in
// names an item may print differently and be reported (never missed).
//
// It means the same under any search_path: every function, operator
// (OPERATOR(pg_catalog.=), also for IN, CASE and IS DISTINCT FROM, written
// as = ANY, CASE WHEN and coalesce), type and collation it names is
// schema-qualified, so nothing a role plants in a schema it puts first in
// its path is used.
//
// A partition created or attached after protect ran, which PostgreSQL gave
// the cloned row-level check, is sound (checked row by row; TRUNCATE of the
// partition itself needs the TRUNCATE privilege, which application roles do
// not hold) and is not a problem: Inspect lists it among the warnings, and
// Install or protect gives it its statement-level checks. An inheritance
// child created after protect gets no check from PostgreSQL and is one.
const HealthQuery = `WITH
fg AS (
	SELECT n.oid, n.nspowner, n.nspacl, r.rolname::pg_catalog.text AS owner, r.rolcanlogin, r.rolsuper
	FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
	WHERE n.nspname OPERATOR(pg_catalog.=) 'fencegate'),
want(name, args, definer, app, guard, config, body) AS (VALUES
` + healthFunctions + `),
have AS (
	SELECT p.oid, p.proname::pg_catalog.text AS name, pg_catalog.pg_get_function_identity_arguments(p.oid) AS args,
	       p.prosecdef, p.proconfig, p.proowner, p.prokind, p.proacl, pg_catalog.md5(p.prosrc) AS body, r.rolsuper AS owner_super
	FROM pg_catalog.pg_proc p JOIN fg ON p.pronamespace OPERATOR(pg_catalog.=) fg.oid JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) p.proowner),
guard AS (
	SELECT e.evtname::pg_catalog.text AS name, e.evtenabled, e.evtevent::pg_catalog.text AS event, e.evtfoid,
	       (SELECT p.proname::pg_catalog.text FROM pg_catalog.pg_proc p JOIN fg ON p.pronamespace OPERATOR(pg_catalog.=) fg.oid WHERE p.oid OPERATOR(pg_catalog.=) e.evtfoid) AS fn
	FROM pg_catalog.pg_event_trigger e WHERE e.evtname OPERATOR(pg_catalog.=) ANY (ARRAY['fencegate_guard_ddl', 'fencegate_guard_drop'])),
rels AS (
	SELECT c.oid, c.relname::pg_catalog.text AS name, c.relkind, c.relowner, c.relacl, c.relrowsecurity
	FROM pg_catalog.pg_class c JOIN fg ON c.relnamespace OPERATOR(pg_catalog.=) fg.oid),
roots AS (` + protectedRootsByIdentitySQL + `),
tree AS (
	WITH RECURSIVE tr(root, relid) AS (
		SELECT relid, relid FROM roots
		UNION ALL
		SELECT tr.root, i.inhrelid FROM tr JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) tr.relid
		JOIN pg_catalog.pg_class k ON k.oid OPERATOR(pg_catalog.=) i.inhrelid AND k.relpersistence OPERATOR(pg_catalog.<>) 't')
	SELECT tr.root, tr.relid, c.relkind, c.relispartition,
	       (SELECT a.attnum FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) tr.relid AND a.attname OPERATOR(pg_catalog.=) 'fencegate_resource' AND NOT a.attisdropped) AS att,
	       (SELECT d.adbin FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_attrdef d ON d.adrelid OPERATOR(pg_catalog.=) a.attrelid AND d.adnum OPERATOR(pg_catalog.=) a.attnum
	        WHERE a.attrelid OPERATOR(pg_catalog.=) tr.relid AND a.attname OPERATOR(pg_catalog.=) 'fencegate_resource' AND NOT a.attisdropped AND a.attgenerated OPERATOR(pg_catalog.=) 's'
	          AND a.attcollation OPERATOR(pg_catalog.=) 'pg_catalog."C"'::pg_catalog.regcollation) AS bin
	FROM tr JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) tr.relid),
trees AS (
	SELECT t.*, r.bin AS root_bin,
	       EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g WHERE g.tgrelid OPERATOR(pg_catalog.=) t.relid AND g.tgname OPERATOR(pg_catalog.=) 'fencegate_row' AND g.tgenabled OPERATOR(pg_catalog.=) 'A'
	               AND g.tgfoid OPERATOR(pg_catalog.=) (SELECT h.oid FROM have h WHERE h.name OPERATOR(pg_catalog.=) 'check_row')) AS row_checked
	FROM tree t JOIN tree r ON r.relid OPERATOR(pg_catalog.=) t.root AND r.root OPERATOR(pg_catalog.=) t.root),
stmt(name, fn, tgtype, kind, qual) AS (VALUES
	('fencegate_ins', 'check_insert', 4, NULL, NULL), ('fencegate_upd', 'check_update', 16, 'p', NULL), ('fencegate_upd', 'check_update_new', 16, 'r', NULL),
	('fencegate_move', 'check_row', 17, 'r', 'resource change'),
	('fencegate_del', 'check_delete', 8, NULL, NULL), ('fencegate_trunc', 'refuse_truncate', 34, NULL, NULL)),
` + inventoryCTE + `,
` + inventoryProblemsCTE + `,
problems(problem) AS (
	SELECT 'schema fencegate is not installed: run "fencegate schema install --db DSN --grant ROLE"'
	WHERE NOT EXISTS (SELECT 1 FROM fg)
UNION ALL
	SELECT pg_catalog.format('role %s owns schema fencegate and %s: run "ALTER ROLE %s NOLOGIN NOSUPERUSER"', fg.owner,
	       CASE WHEN fg.rolsuper THEN 'is a superuser' ELSE 'can log in' END, fg.owner)
	FROM fg WHERE fg.rolcanlogin OR fg.rolsuper
UNION ALL
	SELECT pg_catalog.format('%s on schema fencegate is granted to %s: run "fencegate schema upgrade --db DSN"', a.privilege_type,
	       CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END)
	FROM fg, pg_catalog.aclexplode(fg.nspacl) a
	WHERE a.grantee OPERATOR(pg_catalog.<>) fg.nspowner AND (a.grantee OPERATOR(pg_catalog.=) 0 OR a.privilege_type OPERATOR(pg_catalog.<>) 'USAGE')
UNION ALL
	SELECT pg_catalog.format('function fencegate.%s(%s) is missing: run "fencegate schema upgrade --db DSN"', w.name, w.args)
	FROM want w, fg
	WHERE (NOT w.guard OR EXISTS (SELECT 1 FROM guard))
	  AND NOT EXISTS (SELECT 1 FROM have h WHERE h.name OPERATOR(pg_catalog.=) w.name AND h.args OPERATOR(pg_catalog.=) w.args)
UNION ALL
	SELECT pg_catalog.format('function %s is not part of schema fencegate (an overload or an addition): run "fencegate schema upgrade --db DSN", which drops it', h.oid::pg_catalog.regprocedure)
	FROM have h WHERE NOT EXISTS (SELECT 1 FROM want w WHERE w.name OPERATOR(pg_catalog.=) h.name AND w.args OPERATOR(pg_catalog.=) h.args)
UNION ALL
	SELECT pg_catalog.format('function %s is altered (%s): run "fencegate schema upgrade --db DSN"%s', h.oid::pg_catalog.regprocedure,
	       pg_catalog.concat_ws(', ',
	           CASE WHEN h.body OPERATOR(pg_catalog.<>) w.body THEN 'its body' END,
	           CASE WHEN h.prosecdef OPERATOR(pg_catalog.<>) w.definer THEN 'its SECURITY DEFINER' END,
	           CASE WHEN NOT coalesce(h.proconfig OPERATOR(pg_catalog.=) w.config::pg_catalog.text[], h.proconfig IS NULL AND w.config IS NULL) THEN 'its settings' END,
	           CASE WHEN h.prokind OPERATOR(pg_catalog.<>) 'f' THEN 'its kind' END,
	           CASE WHEN w.guard AND NOT h.owner_super THEN 'its owner, which must be a superuser'
	                WHEN NOT w.guard AND h.proowner OPERATOR(pg_catalog.<>) fg.nspowner THEN 'its owner' END),
	       CASE WHEN w.guard THEN ' as a superuser with --guard-ddl' ELSE '' END)
	FROM have h JOIN want w ON w.name OPERATOR(pg_catalog.=) h.name AND w.args OPERATOR(pg_catalog.=) h.args CROSS JOIN fg
	WHERE h.body OPERATOR(pg_catalog.<>) w.body OR h.prosecdef OPERATOR(pg_catalog.<>) w.definer OR NOT coalesce(h.proconfig OPERATOR(pg_catalog.=) w.config::pg_catalog.text[], h.proconfig IS NULL AND w.config IS NULL) OR h.prokind OPERATOR(pg_catalog.<>) 'f'
	   OR (w.guard AND NOT h.owner_super) OR (NOT w.guard AND h.proowner OPERATOR(pg_catalog.<>) fg.nspowner)
UNION ALL
	SELECT pg_catalog.format('function %s is executable by %s: run "fencegate schema upgrade --db DSN"', h.oid::pg_catalog.regprocedure,
	       CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END)
	FROM have h JOIN want w ON w.name OPERATOR(pg_catalog.=) h.name AND w.args OPERATOR(pg_catalog.=) h.args,
	     pg_catalog.aclexplode(coalesce(h.proacl, pg_catalog.acldefault('f', h.proowner))) a
	WHERE a.grantee OPERATOR(pg_catalog.<>) h.proowner AND (a.grantee OPERATOR(pg_catalog.=) 0 OR NOT (w.app OR w.name OPERATOR(pg_catalog.=) 'check_row'
	      OR w.name OPERATOR(pg_catalog.=) ANY (ARRAY[` + relayFunctionNamesSQL + `])))
UNION ALL
	SELECT pg_catalog.format('table fencegate.%s is missing: run "fencegate schema upgrade --db DSN"', x.name)
	FROM fg, (VALUES ('marks'), ('audit'), ('signing_keys'), ('effects')) x(name)
	WHERE NOT EXISTS (SELECT 1 FROM rels r WHERE r.name OPERATOR(pg_catalog.=) x.name AND r.relkind OPERATOR(pg_catalog.=) 'r')
UNION ALL
	SELECT 'sequence fencegate.floor is missing or altered (it must be a permanent bigint sequence from 0 up, by 1, without cycling): run "fencegate schema upgrade --db DSN"'
	FROM fg WHERE NOT EXISTS (
		SELECT 1 FROM rels r JOIN pg_catalog.pg_sequence q ON q.seqrelid OPERATOR(pg_catalog.=) r.oid JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.oid
		WHERE r.name OPERATOR(pg_catalog.=) 'floor' AND r.relkind OPERATOR(pg_catalog.=) 'S' AND c.relpersistence OPERATOR(pg_catalog.=) 'p'
		  AND q.seqtypid OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype AND q.seqincrement OPERATOR(pg_catalog.=) 1
		  AND q.seqmin OPERATOR(pg_catalog.=) 0 AND q.seqmax OPERATOR(pg_catalog.=) 9223372036854775807 AND NOT q.seqcycle)
UNION ALL
	SELECT 'sequence fencegate.effects_id_seq is missing or altered (it orders each resource''s effects: it must count up by 1, one value at a time, without cycling): run "fencegate schema upgrade --db DSN"'
	FROM fg WHERE NOT EXISTS (
		SELECT 1 FROM rels r JOIN pg_catalog.pg_sequence q ON q.seqrelid OPERATOR(pg_catalog.=) r.oid
		WHERE r.name OPERATOR(pg_catalog.=) 'effects_id_seq' AND r.relkind OPERATOR(pg_catalog.=) 'S'
		  AND q.seqincrement OPERATOR(pg_catalog.=) 1 AND q.seqcache OPERATOR(pg_catalog.=) 1 AND NOT q.seqcycle)
UNION ALL
	SELECT pg_catalog.format('view fencegate.protected is missing: run "fencegate schema upgrade --db DSN"')
	FROM fg WHERE NOT EXISTS (SELECT 1 FROM rels r WHERE r.name OPERATOR(pg_catalog.=) 'protected' AND r.relkind OPERATOR(pg_catalog.=) 'v')
UNION ALL
	SELECT pg_catalog.format('%s fencegate.%s is not part of schema fencegate: drop it (fencegate schema upgrade does not drop relations)',
	       CASE WHEN r.relkind OPERATOR(pg_catalog.=) 'r' THEN 'table' WHEN r.relkind OPERATOR(pg_catalog.=) 'v' THEN 'view' WHEN r.relkind OPERATOR(pg_catalog.=) 'S' THEN 'sequence' WHEN r.relkind OPERATOR(pg_catalog.=) 'i' THEN 'index' ELSE 'relation' END, r.name)
	FROM rels r
	WHERE r.relkind OPERATOR(pg_catalog.<>) ALL (ARRAY['t', 'i', 'c'])
	  AND NOT EXISTS (SELECT 1 FROM expected e WHERE e.kind OPERATOR(pg_catalog.=) 'relation' AND e.name OPERATOR(pg_catalog.=) pg_catalog.quote_ident(r.name))
UNION ALL
	SELECT pg_catalog.format('%s fencegate.%s belongs to role %s, not to the owner role %s: run "fencegate schema upgrade --db DSN"',
	       CASE WHEN r.relkind OPERATOR(pg_catalog.=) 'v' THEN 'view' WHEN r.relkind OPERATOR(pg_catalog.=) 'S' THEN 'sequence' WHEN r.relkind OPERATOR(pg_catalog.=) 'i' THEN 'index' ELSE 'table' END,
	       r.name, r.relowner::pg_catalog.regrole, fg.owner)
	FROM rels r, fg WHERE r.relowner OPERATOR(pg_catalog.<>) fg.nspowner AND r.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'v', 'S', 'p', 'm', 'f'])
UNION ALL
	SELECT pg_catalog.format('%s on fencegate.%s is granted to %s: run "fencegate schema upgrade --db DSN"', a.privilege_type, r.name,
	       CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END)
	FROM rels r, pg_catalog.aclexplode(r.relacl) a
	WHERE a.grantee OPERATOR(pg_catalog.<>) r.relowner AND (a.grantee OPERATOR(pg_catalog.=) 0 OR a.privilege_type OPERATOR(pg_catalog.<>) 'SELECT' OR r.name OPERATOR(pg_catalog.<>) ALL (ARRAY['marks', 'audit']))
UNION ALL
	SELECT pg_catalog.format('table fencegate.%s has row-level security enabled: run "fencegate schema upgrade --db DSN"', r.name)
	FROM rels r WHERE r.relrowsecurity
UNION ALL
	SELECT pg_catalog.format('table fencegate.%s has trigger %s: run "fencegate schema upgrade --db DSN", which drops it', r.name, t.tgname)
	FROM rels r JOIN pg_catalog.pg_trigger t ON t.tgrelid OPERATOR(pg_catalog.=) r.oid WHERE NOT t.tgisinternal
UNION ALL
	SELECT pg_catalog.format('table fencegate.%s has rule %s: run "fencegate schema upgrade --db DSN", which drops it', r.name, w.rulename)
	FROM rels r JOIN pg_catalog.pg_rewrite w ON w.ev_class OPERATOR(pg_catalog.=) r.oid WHERE w.rulename OPERATOR(pg_catalog.<>) '_RETURN'
UNION ALL
	SELECT pg_catalog.format('table fencegate.%s has policy %s: run "fencegate schema upgrade --db DSN", which drops it', r.name, p.polname)
	FROM rels r JOIN pg_catalog.pg_policy p ON p.polrelid OPERATOR(pg_catalog.=) r.oid
UNION ALL
	SELECT pg_catalog.format('column fencegate.marks.%s is missing or changed: run "fencegate schema upgrade --db DSN"', x.col)
	FROM rels r, (VALUES ('resource', 'text', true), ('token', 'bigint', false), ('holder_xid', 'xid8', false), ('holder_boot', 'timestamp with time zone', false)) x(col, typ, bytewise)
	WHERE r.name OPERATOR(pg_catalog.=) 'marks' AND r.relkind OPERATOR(pg_catalog.=) 'r' AND NOT EXISTS (
		SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) r.oid AND a.attname OPERATOR(pg_catalog.=) x.col AND NOT a.attisdropped
		  AND pg_catalog.format_type(a.atttypid, a.atttypmod) OPERATOR(pg_catalog.=) x.typ
		  AND (NOT x.bytewise OR a.attcollation OPERATOR(pg_catalog.=) 'pg_catalog."C"'::pg_catalog.regcollation))
UNION ALL
	SELECT pg_catalog.format('protected table %s computes no resource, or not the same one as %s: %s', t.relid::pg_catalog.regclass, t.root::pg_catalog.regclass, ` + protectFixSQL + `)
	FROM trees t WHERE t.bin IS NULL OR (t.root_bin IS NOT NULL AND CASE
	      WHEN t.bin::pg_catalog.text OPERATOR(pg_catalog.=) t.root_bin::pg_catalog.text THEN false
	      ELSE pg_catalog.pg_get_expr(t.bin, t.relid) IS DISTINCT FROM pg_catalog.pg_get_expr(t.root_bin, t.root) END)
UNION ALL
	SELECT pg_catalog.format('protected table %s is a partition or child of %s, which is not protected, so writes through %s are not checked: run: fencegate unprotect %s --db DSN; then: fencegate protect %s --resource EXPR --db DSN',
	       r.relid::pg_catalog.regclass, i.inhparent::pg_catalog.regclass, i.inhparent::pg_catalog.regclass,
	       ` + shq + `r.relid::pg_catalog.regclass::pg_catalog.text` + shqEnd + `,
	       ` + shq + `i.inhparent::pg_catalog.regclass::pg_catalog.text` + shqEnd + `)
	FROM roots r JOIN pg_catalog.pg_inherits i ON i.inhrelid OPERATOR(pg_catalog.=) r.relid
UNION ALL
	SELECT pg_catalog.format('%s %s has no working fencegate check (%s missing, disabled or changed): %s',
	       CASE WHEN t.relispartition THEN 'partition' WHEN t.relid OPERATOR(pg_catalog.=) t.root THEN 'protected table' ELSE 'child table' END,
	       t.relid::pg_catalog.regclass, s.name, ` + protectFixSQL + `)
	FROM trees t JOIN stmt s ON s.kind IS NULL OR s.kind OPERATOR(pg_catalog.=) t.relkind::pg_catalog.text
	WHERE NOT (t.relispartition AND t.row_checked)
	  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g WHERE g.tgrelid OPERATOR(pg_catalog.=) t.relid AND g.tgname OPERATOR(pg_catalog.=) s.name AND g.tgenabled OPERATOR(pg_catalog.=) 'A'
	                  AND g.tgtype OPERATOR(pg_catalog.=) s.tgtype AND g.tgfoid OPERATOR(pg_catalog.=) (SELECT h.oid FROM have h WHERE h.name OPERATOR(pg_catalog.=) s.fn AND h.args OPERATOR(pg_catalog.=) '')
	                  AND CASE WHEN s.qual IS NULL THEN g.tgqual IS NULL
	                           ELSE g.tgqual::pg_catalog.text OPERATOR(pg_catalog.~) ('^\{DISTINCTEXPR :opno ' OPERATOR(pg_catalog.||) 'pg_catalog.=(pg_catalog.text,pg_catalog.text)'::pg_catalog.regoperator::pg_catalog.oid::pg_catalog.text OPERATOR(pg_catalog.||) ' ')
	                                AND pg_catalog.strpos(g.tgqual::pg_catalog.text, ' :inputcollid ' OPERATOR(pg_catalog.||) 'pg_catalog."C"'::pg_catalog.regcollation::pg_catalog.oid::pg_catalog.text OPERATOR(pg_catalog.||) ' ') OPERATOR(pg_catalog.>) 0
	                                AND pg_catalog.length(g.tgqual::pg_catalog.text) OPERATOR(pg_catalog.-) pg_catalog.length(pg_catalog.replace(g.tgqual::pg_catalog.text, '{', '')) OPERATOR(pg_catalog.=) 3
	                                AND pg_catalog.strpos(g.tgqual::pg_catalog.text, '{VAR :varno 1 :varattno ' OPERATOR(pg_catalog.||) t.att::pg_catalog.text OPERATOR(pg_catalog.||) ' ') OPERATOR(pg_catalog.>) 0
	                                AND pg_catalog.strpos(g.tgqual::pg_catalog.text, '{VAR :varno 2 :varattno ' OPERATOR(pg_catalog.||) t.att::pg_catalog.text OPERATOR(pg_catalog.||) ' ') OPERATOR(pg_catalog.>) 0 END)
UNION ALL
	SELECT pg_catalog.format('%s %s has no working fencegate check (%s missing, disabled or changed): %s',
	       CASE WHEN t.relispartition THEN 'partition' WHEN t.relid OPERATOR(pg_catalog.=) t.root THEN 'protected table' ELSE 'child table' END,
	       t.relid::pg_catalog.regclass, x.name, ` + protectFixSQL + `)
	FROM trees t CROSS JOIN (VALUES ('fencegate_replica'), ('fencegate_row')) x(name)
	WHERE (x.name OPERATOR(pg_catalog.=) 'fencegate_replica' OR t.relkind OPERATOR(pg_catalog.=) 'p')
	  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g WHERE g.tgrelid OPERATOR(pg_catalog.=) t.relid AND g.tgname OPERATOR(pg_catalog.=) x.name
	                  AND g.tgenabled OPERATOR(pg_catalog.=) CASE WHEN x.name OPERATOR(pg_catalog.=) 'fencegate_replica' THEN 'R' ELSE 'A' END
	                  AND g.tgtype OPERATOR(pg_catalog.=) 29 AND g.tgqual IS NULL
	                  AND g.tgfoid OPERATOR(pg_catalog.=) (SELECT h.oid FROM have h WHERE h.name OPERATOR(pg_catalog.=) 'check_row' AND h.args OPERATOR(pg_catalog.=) ''))
UNION ALL
	SELECT pg_catalog.format('the DDL guard is incomplete or disabled (event trigger %s): run "fencegate schema install --guard-ddl --db DSN" as a superuser', x.name)
	FROM (VALUES ('fencegate_guard_ddl', 'ddl_command_end', 'guard_ddl'), ('fencegate_guard_drop', 'sql_drop', 'guard_drop')) x(name, event, fn)
	WHERE EXISTS (SELECT 1 FROM guard)
	  AND NOT EXISTS (SELECT 1 FROM guard g WHERE g.name OPERATOR(pg_catalog.=) x.name AND g.event OPERATOR(pg_catalog.=) x.event AND g.fn OPERATOR(pg_catalog.=) x.fn AND g.evtenabled OPERATOR(pg_catalog.=) 'A')
UNION ALL
	SELECT p.problem FROM inventory_problems p WHERE p.kind OPERATOR(pg_catalog.<>) ALL (ARRAY['trigger', 'rule', 'policy'])
)
SELECT problem FROM problems`

// protectedRootsByIdentitySQL lists the tables protect was called on by
// identity, not by name: a root is a permanent table carrying a trigger
// (not a clone) whose function is fencegate.check_insert() itself, under no
// parent carrying one. A trigger named fencegate_ins that calls anything
// else, and any temporary table (protect refuses them; any role with TEMP
// can make one, and another session's cannot even be altered), is not
// fencegate's. The function is looked up in the catalogs, not with
// to_regprocedure, which fails for a role without USAGE on the schema (the
// gate runs this as any role).
const protectedRootsByIdentitySQL = `SELECT t.tgrelid AS relid FROM pg_catalog.pg_trigger t
	JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
	WHERE t.tgfoid OPERATOR(pg_catalog.=) ` + checkInsertOIDSQL + ` AND t.tgparentid OPERATOR(pg_catalog.=) 0
	  AND c.relpersistence OPERATOR(pg_catalog.<>) 't'
	  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_trigger pt ON pt.tgrelid OPERATOR(pg_catalog.=) i.inhparent AND pt.tgfoid OPERATOR(pg_catalog.=) t.tgfoid
	                  WHERE i.inhrelid OPERATOR(pg_catalog.=) t.tgrelid)`

// checkInsertOIDSQL is the oid of fencegate.check_insert(), read from the
// catalogs (NULL when it is missing).
const checkInsertOIDSQL = `(SELECT p.oid FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
	WHERE n.nspname OPERATOR(pg_catalog.=) 'fencegate' AND p.proname OPERATOR(pg_catalog.=) 'check_insert' AND p.pronargs OPERATOR(pg_catalog.=) 0)`

// protectFixSQL is the repair a problem of a protected table's checks
// names, over a row t of trees: the protect command with the root's
// resource expression. It deparses that expression (pg_get_expr opens the
// table, waiting behind any ACCESS EXCLUSIVE lock on it), so it is only in
// the SELECTs that report a problem, never computed for a sound table: an
// application role that locks its protected table cannot stall the gate.
const protectFixSQL = `pg_catalog.format('run: fencegate protect %s --resource %s --db DSN',
	` + shq + `t.root::pg_catalog.regclass::pg_catalog.text` + shqEnd + `,
	` + shq + `coalesce(CASE WHEN t.root_bin IS NOT NULL THEN pg_catalog.pg_get_expr(t.root_bin, t.root) END, 'EXPR')` + shqEnd + `)`

// shq and shqEnd, around a text expression, quote its value as one word
// for a POSIX shell, as the command line's shellQuote does: in single
// quotes, each single quote of it ending the quoted part, escaped with a
// backslash, and a new quoted part begun. A problem names a command
// to run, which gets pasted into a shell, and a table may be called
// x$(touch /tmp/pwn): PostgreSQL prints it as "x$(touch /tmp/pwn)", and
// the shell expands $(...) between double quotes.
const (
	shq    = `('''' OPERATOR(pg_catalog.||) pg_catalog.replace(`
	shqEnd = `, '''', '''' OPERATOR(pg_catalog.||) pg_catalog.chr(92) OPERATOR(pg_catalog.||) '''''') OPERATOR(pg_catalog.||) '''')`
)
