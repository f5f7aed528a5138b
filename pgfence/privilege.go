package pgfence

// PrivilegeQuery is one plain SELECT, without parameters, that returns no
// rows when session_user is an ordinary role, and otherwise one text row per
// reason the role could switch enforcement off. It reads only the system
// catalogs, so it runs on any database (schema fencegate installed or not),
// as any role, over the simple protocol, before the client's first query.
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
//   - member of pg_write_server_files or pg_execute_server_program: can
//     write the server's files or run programs as the server's OS user;
//   - where schema fencegate has the signing keys table (version 3), member
//     of pg_read_all_data or pg_read_server_files: can read the signing
//     keys a database that requires signed tokens holds, and so forge
//     proofs.
//
// BYPASSRLS is irrelevant (nothing relies on row security), and so are the
// rights an application role needs on its protected tables (SELECT,
// INSERT, UPDATE, DELETE): every write they allow is checked.
const PrivilegeQuery = `WITH
me AS (
	SELECT r.oid, r.rolname::text AS name, r.rolsuper, r.rolcreaterole
	FROM pg_catalog.pg_roles r WHERE r.rolname = session_user),
fg AS (
	SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'fencegate'),
prot AS (
	SELECT DISTINCT t.tgrelid AS relid FROM pg_catalog.pg_trigger t
	JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid JOIN fg ON p.pronamespace = fg.oid),
owned(what, owner) AS (
	SELECT 'schema fencegate', fg.nspowner FROM fg
	UNION
	SELECT pg_catalog.format('%s fencegate.%s', CASE c.relkind WHEN 'v' THEN 'view' WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' ELSE 'table' END, c.relname), c.relowner
	FROM pg_catalog.pg_class c JOIN fg ON c.relnamespace = fg.oid
	UNION
	SELECT pg_catalog.format('function %s', p.oid::pg_catalog.regprocedure), p.proowner
	FROM pg_catalog.pg_proc p JOIN fg ON p.pronamespace = fg.oid
	UNION
	SELECT pg_catalog.format('type fencegate.%s', y.typname), y.typowner
	FROM pg_catalog.pg_type y JOIN fg ON y.typnamespace = fg.oid
	UNION
	SELECT pg_catalog.format('protected table %I.%I', n.nspname, c.relname), c.relowner
	FROM prot JOIN pg_catalog.pg_class c ON c.oid = prot.relid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	UNION
	SELECT pg_catalog.format('schema %I, which holds protected table %I.%I', n.nspname, n.nspname, c.relname), n.nspowner
	FROM prot JOIN pg_catalog.pg_class c ON c.oid = prot.relid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	UNION
	SELECT pg_catalog.format('type %I.%I of a column of protected table %I.%I', yn.nspname, y.typname, n.nspname, c.relname), y.typowner
	FROM prot JOIN pg_catalog.pg_class c ON c.oid = prot.relid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	JOIN pg_catalog.pg_attribute a ON a.attrelid = prot.relid AND a.attnum > 0 AND NOT a.attisdropped
	JOIN pg_catalog.pg_type y ON y.oid IN (a.atttypid, (SELECT e.typelem FROM pg_catalog.pg_type e WHERE e.oid = a.atttypid),
	                                       (SELECT b.typbasetype FROM pg_catalog.pg_type b WHERE b.oid = a.atttypid))
	JOIN pg_catalog.pg_namespace yn ON yn.oid = y.typnamespace
	WHERE y.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace)
SELECT pg_catalog.format('role %s is a superuser', me.name) FROM me WHERE me.rolsuper
UNION ALL
SELECT pg_catalog.format('role %s has CREATEROLE, so it can make itself a member of the roles that own fencegate and the protected tables', me.name)
FROM me WHERE me.rolcreaterole AND NOT me.rolsuper
UNION ALL
SELECT CASE WHEN o.owner = me.oid THEN pg_catalog.format('role %s owns %s', me.name, o.what)
            ELSE pg_catalog.format('role %s is a member of %s, which owns %s', me.name, o.owner::pg_catalog.regrole, o.what) END
FROM me, owned o
WHERE NOT me.rolsuper AND pg_catalog.pg_has_role(me.oid, o.owner, 'MEMBER')
UNION ALL
SELECT pg_catalog.format('role %s is a member of %s, which can %s', me.name, r.rolname,
       CASE r.rolname WHEN 'pg_write_server_files' THEN 'write the server''s files' ELSE 'run programs on the server' END)
FROM me, pg_catalog.pg_roles r
WHERE NOT me.rolsuper AND r.rolname IN ('pg_write_server_files', 'pg_execute_server_program')
  AND pg_catalog.pg_has_role(me.oid, r.oid, 'MEMBER')
UNION ALL
SELECT pg_catalog.format('role %s is a member of %s, which can read the signing keys of fencegate.signing_keys and so forge token proofs', me.name, r.rolname)
FROM me, pg_catalog.pg_roles r, pg_catalog.pg_class k JOIN fg ON k.relnamespace = fg.oid
WHERE NOT me.rolsuper AND k.relname = 'signing_keys' AND k.relkind = 'r'
  AND r.rolname IN ('pg_read_all_data', 'pg_read_server_files')
  AND pg_catalog.pg_has_role(me.oid, r.oid, 'MEMBER')`
