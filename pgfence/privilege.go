package pgfence

// PrivilegeQuery is one plain SELECT, without parameters, that returns no
// rows when session_user is an ordinary role, and otherwise one text row per
// reason the role could switch enforcement off. It reads only the system
// catalogs, so it runs on any database (schema fencegate installed or not),
// as any role, over the simple protocol, before the client's first query.
// Like HealthQuery, it names every function, operator, type and collation
// with its schema (OPERATOR(pg_catalog.=)), so the session's search_path,
// which the role may have chosen and filled, cannot change its meaning.
// Roles count through membership: a role that is a member of a role below
// (at any depth, INHERIT or not, since it can SET ROLE to it) can act as it.
//
// The reasons, each with why it switches enforcement off:
//   - a superuser: bypasses every check (session_replication_role,
//     ALTER TABLE ... DISABLE TRIGGER, event triggers, the catalogs);
//   - CREATEROLE: can grant itself membership in every role below that is
//     not a superuser;
//   - member of the role that owns schema fencegate or any object in it: can
//     replace the fence and the checks, or write and drop the marks;
//   - member of the owner of a protected table (or of one of its
//     partitions or children): can drop or disable its checks, rewrite its
//     rows with ALTER TABLE, or drop and recreate it;
//   - member of the owner of the schema holding a protected table: can drop
//     the table and recreate it without checks;
//   - member of the owner of a type used by a protected table's columns: can
//     change the meaning of stored values (ALTER TYPE ... RENAME VALUE);
//   - member of the owner of a function or operator that code attached to a
//     protected table (or a partition or child) runs: an index expression
//     or predicate, a constraint, a column default or generated column,
//     extended statistics, a row-security policy, a rule, a trigger. Such
//     code runs with the rights of whoever writes or maintains the table
//     (ANALYZE, autovacuum and REINDEX run index expressions as the
//     table's owner), so its owner can replace it and act as the owner;
//   - member of the owner of a function that such code reaches through
//     calls (table -> function -> ... -> owned function): the table's
//     owner's wrapper in an index expression calls the role's function,
//     which the role replaces with one that runs ALTER TABLE ... DISABLE
//     TRIGGER as the owner during the next ANALYZE. The calls are followed
//     conservatively, from every function of the item above (fencegate's
//     own excepted): a SQL-standard body (BEGIN ATOMIC) by pg_depend (its
//     functions, and the functions of its operators); every other body
//     (plpgsql, SQL in a string, any other language but internal and C) by
//     name: any function outside pg_catalog and information_schema whose
//     name, compared case-insensitively, appears in the body as an
//     identifier or a quoted one, whatever its schema. The closure is a
//     recursive query that keeps one row per call (function, caller,
//     depth), stops at depth 8 and does not follow functions of pg_catalog,
//     information_schema or fencegate. A call the body builds at run time
//     (EXECUTE of a name pieced together, format('%I', ...)) is not seen;
//     a name that merely occurs in a body counts as a call (an
//     over-approximation: rename the function, or give it to the table's
//     owner);
//   - holding TRIGGER on a protected table (itself or through a role it is
//     a member of, PUBLIC included): CREATE OR REPLACE TRIGGER needs only
//     that privilege, and replaces a check with a trigger that does nothing;
//   - member of pg_write_server_files or pg_execute_server_program: can
//     write the server's files or run programs as the server's OS user;
//   - member of pg_write_all_data: can write every table, fencegate.marks
//     included (forge a holder, lower a mark);
//   - member of pg_maintain (PostgreSQL 17): holds MAINTAIN on every
//     relation, fencegate.marks and the system catalogs included, so LOCK
//     TABLE ... IN ACCESS EXCLUSIVE MODE (and CLUSTER, VACUUM FULL) on the
//     marks stalls every fence of the database until it gives up with
//     FG004, and the gate's own checks with it; an application role, with
//     SELECT on the marks, can take ACCESS SHARE only. The role does not
//     exist before 17, where the test below finds no row;
//   - member of pg_read_all_data or pg_read_server_files: can read the
//     signing keys a database that requires signed tokens holds (the
//     table, or its files), and so forge proofs. Refused whether or not
//     the database holds keys yet: a session admitted before the next
//     require-signed could read the keys it installs, and the server's
//     files hold every database's;
//   - member of a superuser role, or of a role with CREATEROLE: SET ROLE
//     gives the session that role's attributes (the attributes themselves
//     are not inherited, but SET ROLE needs only membership);
//   - REPLICATION, of session_user itself: over a replication connection
//     straight to the server it can copy the data directory (BASE_BACKUP,
//     fencegate.signing_keys included: a proof forged with a key read so
//     was accepted) and decode every change (the keys of the next
//     require-signed included); of a role it is a member of: after SET
//     ROLE, the logical decoding functions show every change written to
//     the database, those keys included.
//
// BYPASSRLS is irrelevant (nothing relies on row security), and so are the
// rights an application role needs on its protected tables (SELECT,
// INSERT, UPDATE, DELETE): every write they allow is checked.
const PrivilegeQuery = `WITH RECURSIVE
me AS (
	SELECT r.oid, r.rolname::pg_catalog.text AS name, r.rolsuper, r.rolcreaterole, r.rolreplication
	FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) session_user),
fg AS (
	SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) 'fencegate'),
mine AS (
	SELECT r.oid, r.rolname::pg_catalog.text AS name, r.rolsuper, r.rolcreaterole, r.rolreplication FROM pg_catalog.pg_roles r, me
	WHERE r.oid OPERATOR(pg_catalog.<>) me.oid AND pg_catalog.pg_has_role(me.oid, r.oid, 'MEMBER')),
prot AS (
	SELECT DISTINCT t.tgrelid AS relid FROM pg_catalog.pg_trigger t
	JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid JOIN fg ON p.pronamespace OPERATOR(pg_catalog.=) fg.oid),
attached(classid, objid, relid, what) AS (
	SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, i.indexrelid, prot.relid, 'an index' FROM prot JOIN pg_catalog.pg_index i ON i.indrelid OPERATOR(pg_catalog.=) prot.relid
	UNION ALL
	SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, k.oid, prot.relid, 'a constraint' FROM prot JOIN pg_catalog.pg_constraint k ON k.conrelid OPERATOR(pg_catalog.=) prot.relid
	UNION ALL
	SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, d.oid, prot.relid, 'a column default' FROM prot JOIN pg_catalog.pg_attrdef d ON d.adrelid OPERATOR(pg_catalog.=) prot.relid
	UNION ALL
	SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, x.oid, prot.relid, 'extended statistics' FROM prot JOIN pg_catalog.pg_statistic_ext x ON x.stxrelid OPERATOR(pg_catalog.=) prot.relid
	UNION ALL
	SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, p.oid, prot.relid, 'a policy' FROM prot JOIN pg_catalog.pg_policy p ON p.polrelid OPERATOR(pg_catalog.=) prot.relid
	UNION ALL
	SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, w.oid, prot.relid, 'a rule' FROM prot JOIN pg_catalog.pg_rewrite w ON w.ev_class OPERATOR(pg_catalog.=) prot.relid
	UNION ALL
	SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, g.oid, prot.relid, 'a trigger' FROM prot JOIN pg_catalog.pg_trigger g ON g.tgrelid OPERATOR(pg_catalog.=) prot.relid),
code(what, relid, fn, op, owner) AS (
	SELECT a.what, a.relid, p.oid, NULL::pg_catalog.oid, p.proowner
	FROM attached a JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) a.classid AND d.objid OPERATOR(pg_catalog.=) a.objid AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
	JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.refobjid
	WHERE p.pronamespace OPERATOR(pg_catalog.<>) ALL (SELECT fg.oid FROM fg)
	UNION ALL
	SELECT a.what, a.relid, NULL, o.oid, o.oprowner
	FROM attached a JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) a.classid AND d.objid OPERATOR(pg_catalog.=) a.objid AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass
	JOIN pg_catalog.pg_operator o ON o.oid OPERATOR(pg_catalog.=) d.refobjid
	UNION ALL
	SELECT a.what, a.relid, p.oid, NULL, p.proowner
	FROM attached a JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) a.classid AND d.objid OPERATOR(pg_catalog.=) a.objid AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass
	JOIN pg_catalog.pg_operator o ON o.oid OPERATOR(pg_catalog.=) d.refobjid JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) o.oprcode),
cand(oid, lname) AS (
	SELECT p.oid, pg_catalog.lower(p.proname::pg_catalog.text) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
	WHERE n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema'])),
reach(fn, via, depth) AS (
	SELECT DISTINCT c.fn, 0::pg_catalog.oid, 0 FROM code c WHERE c.fn IS NOT NULL
	UNION
	SELECT x.callee, r.fn, r.depth OPERATOR(pg_catalog.+) 1
	FROM reach r JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) r.fn
	JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
	JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) p.prolang,
	LATERAL (
		SELECT d.refobjid FROM pg_catalog.pg_depend d
		WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid OPERATOR(pg_catalog.=) p.oid
		  AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
		UNION
		SELECT o.oprcode::pg_catalog.oid FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_operator o ON o.oid OPERATOR(pg_catalog.=) d.refobjid
		WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid OPERATOR(pg_catalog.=) p.oid
		  AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass
		UNION
		SELECT k.oid FROM (SELECT DISTINCT coalesce(m[1], m[2]) AS w
		                   FROM pg_catalog.regexp_matches(pg_catalog.lower(p.prosrc), '"([^"]+)"|([[:alpha:]_][[:alnum:]_$]*)', 'g') m
		                   WHERE l.lanname OPERATOR(pg_catalog.<>) ALL (ARRAY['internal', 'c'])) ws
		JOIN cand k ON k.lname OPERATOR(pg_catalog.=) ws.w) x(callee)
	WHERE r.depth OPERATOR(pg_catalog.<) 8
	  AND n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema', 'fencegate'])),
hit(fn, depth, owner) AS (
	SELECT r.fn, pg_catalog.min(r.depth), p.proowner FROM reach r JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) r.fn, me
	WHERE NOT me.rolsuper AND pg_catalog.pg_has_role(me.oid, p.proowner, 'MEMBER')
	GROUP BY r.fn, p.proowner HAVING pg_catalog.min(r.depth) OPERATOR(pg_catalog.>) 0),
back(target, owner, cur, depth, chain, name) AS (
	SELECT h.fn, h.owner, h.fn, h.depth, (SELECT pg_catalog.format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes)) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace WHERE p.oid OPERATOR(pg_catalog.=) h.fn), (SELECT pg_catalog.format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes)) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace WHERE p.oid OPERATOR(pg_catalog.=) h.fn)
	FROM hit h
	UNION ALL
	SELECT b.target, b.owner, v.via, b.depth OPERATOR(pg_catalog.-) 1, (SELECT pg_catalog.format('%I.%I(%s)', n.nspname, p.proname, pg_catalog.oidvectortypes(p.proargtypes)) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace WHERE p.oid OPERATOR(pg_catalog.=) v.via)
	       OPERATOR(pg_catalog.||) ' -> ' OPERATOR(pg_catalog.||) b.chain, b.name
	FROM back b JOIN reach v ON v.fn OPERATOR(pg_catalog.=) b.cur AND v.depth OPERATOR(pg_catalog.=) b.depth
	WHERE b.depth OPERATOR(pg_catalog.>) 0),
chained(what, owner) AS (
	SELECT DISTINCT ON (b.target) pg_catalog.format('function %s, which %s of protected table %s reaches through calls (%s -> %s)',
	       b.name, c.what, t.name, t.name, b.chain), b.owner
	FROM back b JOIN code c ON c.fn OPERATOR(pg_catalog.=) b.cur
	JOIN LATERAL (SELECT pg_catalog.format('%I.%I', n.nspname, r.relname) AS name FROM pg_catalog.pg_class r JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) r.relnamespace
	              WHERE r.oid OPERATOR(pg_catalog.=) c.relid) t ON true
	WHERE b.depth OPERATOR(pg_catalog.=) 0
	ORDER BY b.target, c.relid, c.what COLLATE pg_catalog."C", b.chain COLLATE pg_catalog."C"),
owned(what, owner) AS (
	SELECT 'schema fencegate', fg.nspowner FROM fg
	UNION
	SELECT pg_catalog.format('%s fencegate.%s', CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'v' THEN 'view' WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN 'sequence' WHEN c.relkind OPERATOR(pg_catalog.=) 'i' THEN 'index' ELSE 'table' END, c.relname), c.relowner
	FROM pg_catalog.pg_class c JOIN fg ON c.relnamespace OPERATOR(pg_catalog.=) fg.oid
	UNION
	SELECT pg_catalog.format('function %s', p.oid::pg_catalog.regprocedure), p.proowner
	FROM pg_catalog.pg_proc p JOIN fg ON p.pronamespace OPERATOR(pg_catalog.=) fg.oid
	UNION
	SELECT pg_catalog.format('type fencegate.%s', y.typname), y.typowner
	FROM pg_catalog.pg_type y JOIN fg ON y.typnamespace OPERATOR(pg_catalog.=) fg.oid
	UNION
	SELECT pg_catalog.format('protected table %I.%I', n.nspname, c.relname), c.relowner
	FROM prot JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) prot.relid JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
	UNION
	SELECT pg_catalog.format('schema %I, which holds protected table %I.%I', n.nspname, n.nspname, c.relname), n.nspowner
	FROM prot JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) prot.relid JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
	UNION
	SELECT pg_catalog.format('type %I.%I of a column of protected table %I.%I', yn.nspname, y.typname, n.nspname, c.relname), y.typowner
	FROM prot JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) prot.relid JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
	JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) prot.relid AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
	JOIN pg_catalog.pg_type y ON y.oid OPERATOR(pg_catalog.=) ANY (ARRAY[a.atttypid, (SELECT e.typelem FROM pg_catalog.pg_type e WHERE e.oid OPERATOR(pg_catalog.=) a.atttypid),
	                                       (SELECT b.typbasetype FROM pg_catalog.pg_type b WHERE b.oid OPERATOR(pg_catalog.=) a.atttypid)])
	JOIN pg_catalog.pg_namespace yn ON yn.oid OPERATOR(pg_catalog.=) y.typnamespace
	WHERE y.typnamespace OPERATOR(pg_catalog.<>) 'pg_catalog'::pg_catalog.regnamespace
	UNION
	SELECT pg_catalog.format('%s %s, which %s of protected table %s runs', CASE WHEN c.fn IS NULL THEN 'operator' ELSE 'function' END,
	       coalesce(c.fn::pg_catalog.regprocedure::pg_catalog.text, c.op::pg_catalog.regoperator::pg_catalog.text), c.what, c.relid::pg_catalog.regclass), c.owner
	FROM code c
	UNION
	SELECT c.what, c.owner FROM chained c)
SELECT pg_catalog.format('role %s is a superuser', me.name) FROM me WHERE me.rolsuper
UNION ALL
SELECT pg_catalog.format('role %s is a member of %s, which is a superuser (SET ROLE makes it one)', me.name, m.name)
FROM me, mine m WHERE m.rolsuper AND NOT me.rolsuper
UNION ALL
SELECT pg_catalog.format('role %s has CREATEROLE, so it can make itself a member of the roles that own fencegate and the protected tables', me.name)
FROM me WHERE me.rolcreaterole AND NOT me.rolsuper
UNION ALL
SELECT pg_catalog.format('role %s is a member of %s, which has CREATEROLE, so it can make itself a member of the roles that own fencegate and the protected tables', me.name, m.name)
FROM me, mine m WHERE m.rolcreaterole AND NOT m.rolsuper AND NOT me.rolsuper
UNION ALL
SELECT pg_catalog.format('role %s has REPLICATION, so it can copy the database''s files (BASE_BACKUP: the signing keys of fencegate.signing_keys included) and decode every change written to it (the keys of the next require-signed included), and so forge token proofs', me.name)
FROM me WHERE me.rolreplication AND NOT me.rolsuper
UNION ALL
SELECT pg_catalog.format('role %s is a member of %s, which has REPLICATION, so it can decode every change written to the database (the signing keys of the next require-signed included) and so forge token proofs', me.name, m.name)
FROM me, mine m WHERE m.rolreplication AND NOT m.rolsuper AND NOT me.rolsuper AND NOT me.rolreplication
UNION ALL
SELECT CASE WHEN o.owner OPERATOR(pg_catalog.=) me.oid THEN pg_catalog.format('role %s owns %s', me.name, o.what)
            ELSE pg_catalog.format('role %s is a member of %s, which owns %s', me.name, o.owner::pg_catalog.regrole, o.what) END
FROM me, owned o
WHERE NOT me.rolsuper AND pg_catalog.pg_has_role(me.oid, o.owner, 'MEMBER')
UNION ALL
SELECT pg_catalog.format('role %s is a member of %s, which can %s', me.name, r.rolname,
       CASE WHEN r.rolname OPERATOR(pg_catalog.=) 'pg_write_server_files' THEN 'write the server''s files'
                      WHEN r.rolname OPERATOR(pg_catalog.=) 'pg_write_all_data' THEN 'write every table, fencegate.marks included'
                      WHEN r.rolname OPERATOR(pg_catalog.=) 'pg_maintain' THEN 'lock every table (LOCK TABLE ... IN ACCESS EXCLUSIVE MODE), fencegate.marks included, and so stall every fence'
                      ELSE 'run programs on the server' END)
FROM me, pg_catalog.pg_roles r
WHERE NOT me.rolsuper AND r.rolname OPERATOR(pg_catalog.=) ANY (ARRAY['pg_write_server_files', 'pg_execute_server_program', 'pg_write_all_data', 'pg_maintain'])
  AND pg_catalog.pg_has_role(me.oid, r.oid, 'MEMBER')
UNION ALL
SELECT pg_catalog.format('role %s %s TRIGGER on protected table %s, so it can replace its checks (CREATE OR REPLACE TRIGGER)', me.name,
       CASE WHEN x.via IS NULL THEN 'holds' ELSE pg_catalog.format('is a member of %s, which holds', x.via) END, x.relid::pg_catalog.regclass)
FROM me, LATERAL (
	SELECT prot.relid, (SELECT m.name FROM mine m WHERE pg_catalog.has_table_privilege(m.oid, prot.relid, 'TRIGGER')
	                    ORDER BY m.name LIMIT 1) AS via,
	       pg_catalog.has_table_privilege(me.oid, prot.relid, 'TRIGGER') AS direct
	FROM prot) x
WHERE NOT me.rolsuper AND (x.direct OR x.via IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) x.relid AND pg_catalog.pg_has_role(me.oid, c.relowner, 'MEMBER'))
UNION ALL
SELECT pg_catalog.format('role %s is a member of %s, which can read the signing keys of fencegate.signing_keys (%s) and so forge token proofs', me.name, r.rolname,
       CASE WHEN r.rolname OPERATOR(pg_catalog.=) 'pg_read_all_data' THEN 'every table of every database, the keys of the next require-signed included'
                      ELSE 'the server''s files, those of every database''s tables included' END)
FROM me, pg_catalog.pg_roles r
WHERE NOT me.rolsuper AND r.rolname OPERATOR(pg_catalog.=) ANY (ARRAY['pg_read_all_data', 'pg_read_server_files'])
  AND pg_catalog.pg_has_role(me.oid, r.oid, 'MEMBER')`
