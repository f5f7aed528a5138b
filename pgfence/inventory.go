package pgfence

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The inventory: everything in schema fencegate and on its relations,
// compared with what sql/schema.sql creates.
//
// Before version 2 the application role owned schema fencegate and the
// marks, and whatever it attached to them (a CHECK constraint or a column
// default calling its own function, an expression index, a column grant, a
// type, a pre-created table of a later version) would survive every
// upgrade: CREATE TABLE IF NOT EXISTS keeps a table as it finds it. Code
// attached to the marks runs as the owner role at every fence. So status
// and the gate (HealthQuery) report each object that is not in the expected
// inventory, and Install removes it (or refuses, naming it, where removing
// it would lose data or cannot be done safely).
//
// PostgreSQL 18 records every NOT NULL as a constraint of its own
// (pg_constraint.contype 'n', named TABLE_COLUMN_not_null), where older
// majors keep only pg_attribute.attnotnull. The column item already says NOT
// NULL, so a validated, inheritable not-null constraint is that same fact and
// is left out of the constraints; one that says more (NOT VALID, NO INHERIT)
// stays in and is reported, and removed by Install. Such a one also sets
// attnotnull, so the column item counts only plain ones: a planted NOT
// VALID or NO INHERIT constraint is the one item reported, with the repair
// that removes it. 18's virtual generated columns print as such.
//
// The expected inventory (inventoryExpected, in health_functions.go) is not
// written by hand: TestInventoryExpected installs sql/schema.sql into an
// empty database, lists its inventory with InventoryQuery and fails when the
// list in the source differs (-update rewrites it). Each item is a row
// (kind, relation, name, definition) printed by PostgreSQL itself
// (pg_get_constraintdef, pg_get_indexdef, pg_get_expr, format_type) under
// the pinned search_path pg_catalog, pg_temp, in which every name outside
// pg_catalog is printed schema-qualified: a planted CHECK calling the
// application's function prints as CHECK (app.f(token)) and never matches.
// The gate and every admin session pin that path; under another path an
// item can print differently and is then reported (a false alarm, never a
// miss).

// InventoryQuery lists every object in schema fencegate and on its
// relations, one row (kind, rel, name, def) each: functions and relations
// of the schema are left to HealthQuery's own checks; other objects of the
// schema (types, operators, default privileges, ...); and for each relation
// of the schema that sql/schema.sql creates, its columns, column defaults,
// constraints, foreign keys of other tables that reference it, indexes,
// extended statistics, triggers, rules, policies and column grants, and
// every dependency of those on an object outside schema fencegate that is
// not built in. It reads the system catalogs only, as any role.
const InventoryQuery = `WITH fg AS (
	SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) 'fencegate'),
` + inventoryCTE + `
SELECT kind, rel, name, def FROM inv ORDER BY kind COLLATE pg_catalog."C", rel COLLATE pg_catalog."C", name COLLATE pg_catalog."C", def COLLATE pg_catalog."C"`

// inventoryCTE defines inv(kind, rel, name, def, fix, restorable) from the
// CTE fg (the oid of schema fencegate). fix is the statement that removes
// an unexpected item, NULL where no statement can do it safely.
const inventoryCTE = `known AS (
	SELECT c.oid, c.relkind, pg_catalog.format('%I.%I', 'fencegate', c.relname) AS rel
	FROM pg_catalog.pg_class c JOIN fg ON c.relnamespace OPERATOR(pg_catalog.=) fg.oid
	WHERE c.relname OPERATOR(pg_catalog.=) ANY (SELECT e.name FROM (VALUES ` + inventoryExpected + `) e(kind, rel, name, def) WHERE e.kind OPERATOR(pg_catalog.=) 'relation')),
attached(classid, objid, rel) AS (
	SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, d.oid, k.rel FROM pg_catalog.pg_attrdef d JOIN known k ON k.oid OPERATOR(pg_catalog.=) d.adrelid
	UNION ALL SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid, k.rel FROM pg_catalog.pg_constraint c JOIN known k ON k.oid OPERATOR(pg_catalog.=) c.conrelid
	UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, i.indexrelid, k.rel FROM pg_catalog.pg_index i JOIN known k ON k.oid OPERATOR(pg_catalog.=) i.indrelid
	UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, k.oid, k.rel FROM known k
	UNION ALL SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, s.oid, k.rel FROM pg_catalog.pg_statistic_ext s JOIN known k ON k.oid OPERATOR(pg_catalog.=) s.stxrelid
	UNION ALL SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, t.oid, k.rel FROM pg_catalog.pg_trigger t JOIN known k ON k.oid OPERATOR(pg_catalog.=) t.tgrelid
	UNION ALL SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, r.oid, k.rel FROM pg_catalog.pg_rewrite r JOIN known k ON k.oid OPERATOR(pg_catalog.=) r.ev_class
	UNION ALL SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, p.oid, k.rel FROM pg_catalog.pg_policy p JOIN known k ON k.oid OPERATOR(pg_catalog.=) p.polrelid),
inv(kind, rel, name, def, fix) AS (
	SELECT 'relation', '', pg_catalog.format('%I', c.relname),
	       CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'r' THEN 'table' WHEN c.relkind OPERATOR(pg_catalog.=) 'v' THEN 'view' WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN 'sequence' WHEN c.relkind OPERATOR(pg_catalog.=) 'i' THEN 'index' WHEN c.relkind OPERATOR(pg_catalog.=) 'p' THEN 'partitioned table'
	                      WHEN c.relkind OPERATOR(pg_catalog.=) 'm' THEN 'materialized view' WHEN c.relkind OPERATOR(pg_catalog.=) 'f' THEN 'foreign table' WHEN c.relkind OPERATOR(pg_catalog.=) 'c' THEN 'composite type' ELSE c.relkind::pg_catalog.text END,
	       NULL::pg_catalog.text
	FROM pg_catalog.pg_class c JOIN fg ON c.relnamespace OPERATOR(pg_catalog.=) fg.oid
	WHERE c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p', 'v', 'm', 'f', 'S'])
UNION ALL
	SELECT 'object', '', pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), '',
	       CASE WHEN i.type OPERATOR(pg_catalog.=) ANY (ARRAY['type', 'domain', 'operator', 'operator class', 'operator family', 'collation', 'conversion', 'statistics object',
	                            'text search configuration', 'text search dictionary', 'text search parser', 'text search template', 'aggregate'])
	            THEN pg_catalog.format('DROP %s %s', pg_catalog.upper(i.type), i.identity) END
	FROM fg JOIN pg_catalog.pg_depend d ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass AND d.refobjid OPERATOR(pg_catalog.=) fg.oid
	CROSS JOIN LATERAL pg_catalog.pg_identify_object(d.classid, d.objid, d.objsubid) i
	WHERE d.classid OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog.pg_proc'::pg_catalog.regclass, 'pg_catalog.pg_class'::pg_catalog.regclass, 'pg_catalog.pg_default_acl'::pg_catalog.regclass])
UNION ALL
	SELECT 'object', '', pg_catalog.pg_describe_object('pg_catalog.pg_default_acl'::pg_catalog.regclass, a.oid, 0), '',
	       (SELECT pg_catalog.string_agg(pg_catalog.format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA fencegate REVOKE ALL ON %s FROM %s',
	                   a.defaclrole::pg_catalog.regrole::pg_catalog.text,
	                   CASE WHEN a.defaclobjtype OPERATOR(pg_catalog.=) 'r' THEN 'TABLES' WHEN a.defaclobjtype OPERATOR(pg_catalog.=) 'S' THEN 'SEQUENCES' WHEN a.defaclobjtype OPERATOR(pg_catalog.=) 'f' THEN 'FUNCTIONS' WHEN a.defaclobjtype OPERATOR(pg_catalog.=) 'T' THEN 'TYPES' ELSE 'SCHEMAS' END,
	                   CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(x.grantee::pg_catalog.regrole::pg_catalog.text) END), '; ')
	        FROM pg_catalog.aclexplode(a.defaclacl) x)
	FROM fg JOIN pg_catalog.pg_default_acl a ON a.defaclnamespace OPERATOR(pg_catalog.=) fg.oid
	WHERE a.defaclrole OPERATOR(pg_catalog.=) fg.nspowner
UNION ALL
	SELECT 'column', k.rel, pg_catalog.format('%I', a.attname),
	       pg_catalog.format_type(a.atttypid, a.atttypmod)
	       OPERATOR(pg_catalog.||) CASE WHEN a.attcollation OPERATOR(pg_catalog.<>) t.typcollation THEN ' COLLATE ' OPERATOR(pg_catalog.||) a.attcollation::pg_catalog.regcollation::pg_catalog.text ELSE '' END
	       OPERATOR(pg_catalog.||) CASE WHEN a.attnotnull AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint n
	                                     WHERE n.conrelid OPERATOR(pg_catalog.=) a.attrelid AND n.contype OPERATOR(pg_catalog.=) 'n'
	                                       AND n.conkey OPERATOR(pg_catalog.=) ARRAY[a.attnum] AND (NOT n.convalidated OR n.connoinherit))
	                                    THEN ' NOT NULL' ELSE '' END
	       OPERATOR(pg_catalog.||) CASE WHEN a.attidentity OPERATOR(pg_catalog.=) 'a' THEN ' GENERATED ALWAYS AS IDENTITY' WHEN a.attidentity OPERATOR(pg_catalog.=) 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END
	       OPERATOR(pg_catalog.||) CASE WHEN a.attgenerated OPERATOR(pg_catalog.=) 's' THEN ' GENERATED STORED' WHEN a.attgenerated OPERATOR(pg_catalog.=) 'v' THEN ' GENERATED VIRTUAL' ELSE '' END,
	       pg_catalog.format('ALTER TABLE %s DROP COLUMN %I', k.rel, a.attname)
	FROM known k JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) k.oid AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
	JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid
	WHERE k.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p'])
UNION ALL
	SELECT 'default', k.rel, pg_catalog.format('%I', a.attname), pg_catalog.pg_get_expr(d.adbin, d.adrelid),
	       CASE WHEN a.attgenerated OPERATOR(pg_catalog.=) '' THEN pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', k.rel, a.attname) END
	FROM known k JOIN pg_catalog.pg_attrdef d ON d.adrelid OPERATOR(pg_catalog.=) k.oid
	JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) d.adrelid AND a.attnum OPERATOR(pg_catalog.=) d.adnum
UNION ALL
	SELECT 'constraint', k.rel, pg_catalog.format('%I', c.conname), pg_catalog.pg_get_constraintdef(c.oid),
	       pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', k.rel, c.conname)
	FROM known k JOIN pg_catalog.pg_constraint c ON c.conrelid OPERATOR(pg_catalog.=) k.oid
	WHERE NOT (c.contype OPERATOR(pg_catalog.=) 'n' AND c.convalidated AND NOT c.connoinherit)
UNION ALL
	SELECT 'referencing constraint', k.rel, pg_catalog.format('%s.%I', c.conrelid::pg_catalog.regclass, c.conname), pg_catalog.pg_get_constraintdef(c.oid),
	       pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::pg_catalog.regclass, c.conname)
	FROM known k JOIN pg_catalog.pg_constraint c ON c.confrelid OPERATOR(pg_catalog.=) k.oid AND c.conrelid OPERATOR(pg_catalog.<>) k.oid
UNION ALL
	SELECT 'index', k.rel, pg_catalog.format('%I', x.relname), pg_catalog.pg_get_indexdef(i.indexrelid),
	       pg_catalog.format('DROP INDEX %I.%I', 'fencegate', x.relname)
	FROM known k JOIN pg_catalog.pg_index i ON i.indrelid OPERATOR(pg_catalog.=) k.oid JOIN pg_catalog.pg_class x ON x.oid OPERATOR(pg_catalog.=) i.indexrelid
	WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c WHERE c.conindid OPERATOR(pg_catalog.=) i.indexrelid AND c.conrelid OPERATOR(pg_catalog.=) k.oid)
UNION ALL
	SELECT 'statistics', k.rel, pg_catalog.format('%I.%I', n.nspname, s.stxname), '',
	       pg_catalog.format('DROP STATISTICS %I.%I', n.nspname, s.stxname)
	FROM known k JOIN pg_catalog.pg_statistic_ext s ON s.stxrelid OPERATOR(pg_catalog.=) k.oid JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) s.stxnamespace
UNION ALL
	SELECT 'trigger', k.rel, pg_catalog.format('%I', t.tgname), pg_catalog.pg_get_triggerdef(t.oid),
	       pg_catalog.format('DROP TRIGGER %I ON %s', t.tgname, k.rel)
	FROM known k JOIN pg_catalog.pg_trigger t ON t.tgrelid OPERATOR(pg_catalog.=) k.oid
	WHERE NOT (t.tgisinternal AND t.tgconstraint OPERATOR(pg_catalog.<>) 0)
UNION ALL
	SELECT 'rule', k.rel, pg_catalog.format('%I', r.rulename), pg_catalog.pg_get_ruledef(r.oid),
	       pg_catalog.format('DROP RULE %I ON %s', r.rulename, k.rel)
	FROM known k JOIN pg_catalog.pg_rewrite r ON r.ev_class OPERATOR(pg_catalog.=) k.oid
	WHERE NOT (k.relkind OPERATOR(pg_catalog.=) 'v' AND r.rulename OPERATOR(pg_catalog.=) '_RETURN')
UNION ALL
	SELECT 'policy', k.rel, pg_catalog.format('%I', p.polname), '',
	       pg_catalog.format('DROP POLICY %I ON %s', p.polname, k.rel)
	FROM known k JOIN pg_catalog.pg_policy p ON p.polrelid OPERATOR(pg_catalog.=) k.oid
UNION ALL
	SELECT 'column grant', k.rel, pg_catalog.format('%I', a.attname),
	       x.privilege_type OPERATOR(pg_catalog.||) ' to ' OPERATOR(pg_catalog.||) CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE x.grantee::pg_catalog.regrole::pg_catalog.text END,
	       pg_catalog.format('REVOKE ALL (%I) ON %s FROM %s', a.attname, k.rel,
	                         CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(x.grantee::pg_catalog.regrole::pg_catalog.text) END)
	FROM known k JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) k.oid AND a.attacl IS NOT NULL AND NOT a.attisdropped
	CROSS JOIN LATERAL pg_catalog.aclexplode(a.attacl) x
UNION ALL
	SELECT 'dependency', a.rel, pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), NULL
	FROM attached a JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) a.classid AND d.objid OPERATOR(pg_catalog.=) a.objid
	CROSS JOIN LATERAL pg_catalog.pg_identify_object(d.refclassid, d.refobjid, 0) r
	WHERE coalesce(r.schema OPERATOR(pg_catalog.<>) 'fencegate', true) AND coalesce(r.schema OPERATOR(pg_catalog.<>) 'pg_toast', true)
	  AND NOT (d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass AND d.refobjid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM known))
	  AND d.refclassid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_namespace'::pg_catalog.regclass
)`

// inventoryProblemsCTE defines inventory_problems(problem, fix, missing)
// from inv: every item that is not expected, and every expected item that
// is missing, each as a line for HealthQuery.
const inventoryProblemsCTE = `expected(kind, rel, name, def) AS (VALUES ` + inventoryExpected + `),
inventory_items(kind, item, fix, restore, unexpected) AS (
	SELECT i.kind,
	       pg_catalog.format('%s %s%s%s', i.kind, i.name, CASE WHEN i.rel OPERATOR(pg_catalog.<>) '' THEN ' on ' OPERATOR(pg_catalog.||) i.rel ELSE '' END, CASE WHEN i.def OPERATOR(pg_catalog.<>) '' THEN ' (' OPERATOR(pg_catalog.||) i.def OPERATOR(pg_catalog.||) ')' ELSE '' END),
	       CASE WHEN NOT (i.kind OPERATOR(pg_catalog.=) 'column' AND EXISTS (SELECT 1 FROM expected e WHERE e.kind OPERATOR(pg_catalog.=) 'column' AND e.rel OPERATOR(pg_catalog.=) i.rel AND e.name OPERATOR(pg_catalog.=) i.name)) THEN i.fix END,
	       NULL::pg_catalog.text, true
	FROM inv i
	WHERE i.kind OPERATOR(pg_catalog.<>) 'relation' AND NOT EXISTS (SELECT 1 FROM expected e WHERE e.kind OPERATOR(pg_catalog.=) i.kind AND e.rel OPERATOR(pg_catalog.=) i.rel AND e.name OPERATOR(pg_catalog.=) i.name AND e.def OPERATOR(pg_catalog.=) i.def)
UNION ALL
	SELECT e.kind, pg_catalog.format('%s %s on %s (%s)', e.kind, e.name, e.rel, e.def), NULL,
	       CASE WHEN e.kind OPERATOR(pg_catalog.=) 'constraint' THEN pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %s %s', e.rel, e.name, e.def)
	                   WHEN e.kind OPERATOR(pg_catalog.=) 'default' THEN pg_catalog.format('ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %s', e.rel, e.name, e.def)
	                   WHEN e.kind OPERATOR(pg_catalog.=) 'index' THEN e.def END,
	       false
	FROM expected e
	WHERE e.kind OPERATOR(pg_catalog.<>) 'relation'
	  AND EXISTS (SELECT 1 FROM known k WHERE k.rel OPERATOR(pg_catalog.=) e.rel)
	  AND NOT EXISTS (SELECT 1 FROM inv i WHERE e.kind OPERATOR(pg_catalog.=) i.kind AND e.rel OPERATOR(pg_catalog.=) i.rel AND e.name OPERATOR(pg_catalog.=) i.name AND e.def OPERATOR(pg_catalog.=) i.def)),
inventory_problems(problem, kind) AS (
	SELECT CASE WHEN p.unexpected
	            THEN pg_catalog.format('%s was not created by fencegate: run "fencegate schema upgrade --db DSN", which %s', p.item,
	                 CASE WHEN p.kind OPERATOR(pg_catalog.=) 'dependency' THEN 'removes it with the object' WHEN p.fix IS NULL THEN 'refuses until an administrator removes it' ELSE 'removes it' END)
	            ELSE pg_catalog.format('%s is missing: run "fencegate schema upgrade --db DSN"%s', p.item,
	                 CASE WHEN p.restore IS NULL THEN ', which refuses until an administrator restores it' ELSE '' END) END,
	       p.kind
	FROM inventory_items p
)`

// inventoryFixesQuery lists what Install does about the inventory: the
// statements that remove unexpected items (first what references others,
// then triggers, rules and policies, then the rest, columns and indexes
// last) and then those that restore missing ones, with the line to report;
// and the items it cannot fix (refuse).
const inventoryFixesQuery = `WITH fg AS (
	SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) 'fencegate'),
` + inventoryCTE + `,
` + inventoryProblemsCTE + `
SELECT CASE WHEN p.fix IS NOT NULL THEN 'removed ' OPERATOR(pg_catalog.||) p.item WHEN p.restore IS NOT NULL THEN 'restored ' OPERATOR(pg_catalog.||) p.item ELSE p.item END,
       coalesce(p.fix, p.restore), p.fix IS NULL AND p.restore IS NULL AND p.kind OPERATOR(pg_catalog.<>) 'dependency', p.fix IS NOT NULL
FROM inventory_items p
ORDER BY p.restore IS NOT NULL, p.kind OPERATOR(pg_catalog.<>) 'referencing constraint', p.kind OPERATOR(pg_catalog.<>) ALL (ARRAY['trigger', 'rule', 'policy']),
         p.kind OPERATOR(pg_catalog.=) 'column', p.kind OPERATOR(pg_catalog.=) 'index', p.item COLLATE pg_catalog."C"`

// inventoryFix is one row of inventoryFixesQuery.
type inventoryFix struct {
	line    string  // what is done, or what is refused
	stmt    *string // the statement that does it; nil when none can
	refuse  bool    // nothing can remove it safely
	removal bool    // stmt removes an unexpected item (else it restores one)
}

func inventoryFixes(ctx context.Context, tx pgx.Tx) ([]inventoryFix, error) {
	rows, err := tx.Query(ctx, inventoryFixesQuery)
	if err != nil {
		return nil, fmt.Errorf("list the inventory of schema fencegate: %w", classify(err))
	}
	fixes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (inventoryFix, error) {
		var f inventoryFix
		err := r.Scan(&f.line, &f.stmt, &f.refuse, &f.removal)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("list the inventory of schema fencegate: %w", classify(err))
	}
	return fixes, nil
}

func (f inventoryFix) apply(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, *f.stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("%w: %s: %s failed: %w", ErrUnexpectedObjects, f.line, *f.stmt, classify(err))
	}
	return nil
}

// removePlantedCode removes, in tx and before sql/schema.sql runs, every
// unexpected item the inventory can remove: sql/schema.sql rewrites the
// marks of version 1 (ALTER COLUMN ... TYPE), which evaluates their CHECK
// constraints and rebuilds their indexes as the owner role, so code the
// application attached to them must be gone first. It neither restores nor
// refuses anything: removeUnexpected does that once sql/schema.sql ran. It
// returns a line per change.
func removePlantedCode(ctx context.Context, tx pgx.Tx) ([]string, error) {
	fixes, err := inventoryFixes(ctx, tx)
	if err != nil {
		return nil, err
	}
	var done []string
	for _, f := range fixes {
		if f.stmt == nil || !f.removal {
			continue
		}
		if err := f.apply(ctx, tx); err != nil {
			return nil, err
		}
		done = append(done, f.line)
	}
	return done, nil
}

// removeUnexpected removes from schema fencegate and its relations every
// object that sql/schema.sql does not create and restores the constraints,
// defaults and indexes it creates that are missing, in tx, which must run
// as a superuser or the owner role after sql/schema.sql ran. It returns a
// line per change. When something remains that it cannot remove safely (a
// column of an expected name with another type, a missing column, an
// object of a kind it does not drop) it fails with ErrUnexpectedObjects
// naming each, so that the install transaction rolls back.
func removeUnexpected(ctx context.Context, tx pgx.Tx) ([]string, error) {
	var done []string
	for round := 0; round < 3; round++ {
		fixes, err := inventoryFixes(ctx, tx)
		if err != nil {
			return nil, err
		}
		var refused, left []string
		acted := false
		for _, f := range fixes {
			switch {
			case f.refuse:
				refused = append(refused, f.line)
			case f.stmt == nil:
				left = append(left, f.line)
			default:
				if err := f.apply(ctx, tx); err != nil {
					return nil, err
				}
				done = append(done, f.line)
				acted = true
			}
		}
		if len(refused) > 0 {
			return nil, fmt.Errorf("%w; remove them, then upgrade again:\n%s", ErrUnexpectedObjects, strings.Join(refused, "\n"))
		}
		if !acted {
			if len(left) > 0 {
				return nil, fmt.Errorf("%w; remove them, then upgrade again:\n%s", ErrUnexpectedObjects, strings.Join(left, "\n"))
			}
			return done, nil
		}
	}
	return nil, fmt.Errorf("%w: they remain after three rounds of removal", ErrUnexpectedObjects)
}

// unexpectedRelationsSQL lists the relations of schema fencegate (tables,
// views, sequences, ...; indexes and composite types are in the inventory)
// that sql/schema.sql does not create, with their kind and owner.
const unexpectedRelationsSQL = `SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table' WHEN 'v' THEN 'view'
	       WHEN 'm' THEN 'materialized view' WHEN 'f' THEN 'foreign table' ELSE 'sequence' END,
	c.oid::pg_catalog.regclass::pg_catalog.text, c.relowner::pg_catalog.regrole::pg_catalog.text
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = 'fencegate' AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
	  AND pg_catalog.quote_ident(c.relname) NOT IN (SELECT e.name FROM (VALUES ` + inventoryExpected + `) e(kind, rel, name, def) WHERE e.kind = 'relation')
	ORDER BY 2`

// refuseUnexpectedRelations fails with ErrUnexpectedObjects naming every
// relation of schema fencegate that sql/schema.sql does not create. Install
// hands the schema's relations to the owner role; a table the application
// made there (when it owned the schema, in version 1, or held CREATE on it)
// would become the owner role's, and code attached to it (an expression
// index, which ANALYZE and autovacuum run as the table's owner) would then
// run as the owner role. Nor is it dropped: it may hold the application's
// data. An administrator looks at it and drops it or moves it out of the
// schema (ALTER TABLE ... SET SCHEMA).
func refuseUnexpectedRelations(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, unexpectedRelationsSQL)
	if err != nil {
		return fmt.Errorf("look for relations fencegate did not create: %w", classify(err))
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var kind, name, owner string
		err := r.Scan(&kind, &name, &owner)
		return fmt.Sprintf("%s %s (owned by %s) was not created by fencegate", kind, name, owner), err
	})
	if err != nil {
		return fmt.Errorf("look for relations fencegate did not create: %w", classify(err))
	}
	if len(found) > 0 {
		return fmt.Errorf("%w; drop them or move them to another schema (ALTER ... SET SCHEMA), then upgrade again:\n%s", ErrUnexpectedObjects, strings.Join(found, "\n"))
	}
	return nil
}

// plantedTablesSQL finds the tables of schema fencegate that a later version
// creates and that are already there although fencegate did not create
// them: a version before the table's own (version 1 had only the marks,
// version 2 added the audit, version 3 the signing keys, version 5 the
// floor sequence, whose value a planted one would carry over, version 6 the
// effects, whose rows a relay would deliver), an owner or a
// schema owner that can log in or is a superuser (fencegate creates its
// tables as the owner role, which can do neither; version 1's schema
// belonged to the application role), or not of its kind (a plain table; the
// floor a sequence, which holds no data to keep). sql/schema.sql
// creates them with CREATE TABLE IF NOT EXISTS, which would keep such a
// table as it is: its columns, its data (keys the application chose), the
// code attached to it. Size and children are read from the catalogs: no
// query runs on the table itself (its policies are the application's code).
const plantedTablesSQL = `SELECT c.oid::pg_catalog.regclass::pg_catalog.text,
	CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'v' THEN 'VIEW' WHEN c.relkind OPERATOR(pg_catalog.=) 'm' THEN 'MATERIALIZED VIEW' WHEN c.relkind OPERATOR(pg_catalog.=) 'f' THEN 'FOREIGN TABLE' WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
	c.relkind OPERATOR(pg_catalog.<>) 'S' AND (pg_catalog.pg_relation_size(c.oid) OPERATOR(pg_catalog.>) 0 OR (c.reltoastrelid OPERATOR(pg_catalog.<>) 0 AND pg_catalog.pg_relation_size(c.reltoastrelid) OPERATOR(pg_catalog.>) 0) OR EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhparent OPERATOR(pg_catalog.=) c.oid)),
	ro.rolname::pg_catalog.text
	FROM (VALUES ('audit', 2, 'r'), ('signing_keys', 3, 'r'), ('floor', 5, 'S'), ('effects', 6, 'r')) x(name, since, kind)
	JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) 'fencegate'
	JOIN pg_catalog.pg_roles so ON so.oid OPERATOR(pg_catalog.=) n.nspowner
	JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) x.name
	JOIN pg_catalog.pg_roles ro ON ro.oid OPERATOR(pg_catalog.=) c.relowner
	WHERE x.since OPERATOR(pg_catalog.>) $1 OR ro.rolcanlogin OR ro.rolsuper OR so.rolcanlogin OR so.rolsuper OR c.relkind::pg_catalog.text OPERATOR(pg_catalog.<>) x.kind
	ORDER BY 1`

// dropPlantedTables drops, in tx and before sql/schema.sql runs, every table
// plantedTablesSQL finds, so that sql/schema.sql creates it as it should
// be; fromVersion is the installed version. A planted table that holds data
// is not dropped: it fails with ErrUnexpectedObjects naming it (an
// administrator looks at it and drops it). It returns a line per table
// dropped.
func dropPlantedTables(ctx context.Context, tx pgx.Tx, fromVersion int) ([]string, error) {
	rows, err := tx.Query(ctx, plantedTablesSQL, fromVersion)
	if err != nil {
		return nil, fmt.Errorf("look for tables fencegate did not create: %w", classify(err))
	}
	type planted struct {
		name, kind, owner string
		data              bool
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (planted, error) {
		var p planted
		err := r.Scan(&p.name, &p.kind, &p.data, &p.owner)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("look for tables fencegate did not create: %w", classify(err))
	}
	var refused, done []string
	for _, p := range ps {
		if p.data {
			refused = append(refused, fmt.Sprintf("%s %s (owned by %s) was not created by fencegate and holds data", strings.ToLower(p.kind), p.name, p.owner))
			continue
		}
		if _, err := tx.Exec(ctx, "DROP "+p.kind+" "+p.name); err != nil {
			return nil, fmt.Errorf("%w: drop %s %s (owned by %s), which fencegate did not create: %w", ErrUnexpectedObjects, strings.ToLower(p.kind), p.name, p.owner, classify(err))
		}
		done = append(done, fmt.Sprintf("dropped %s %s (owned by %s), which fencegate did not create", strings.ToLower(p.kind), p.name, p.owner))
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("%w; look at them and drop them, then upgrade again:\n%s", ErrUnexpectedObjects, strings.Join(refused, "\n"))
	}
	return done, nil
}

// foreignColumnTypesSQL lists each column of a table or view of schema
// fencegate whose type is not built in: a type outside pg_catalog, a
// domain, or an array of either. Each row is the line to report, with the
// statement that changes the column back to the type fencegate gives it.
const foreignColumnTypesSQL = `SELECT pg_catalog.format('column %s.%I has type %s, not a built-in type: an administrator changes it back (ALTER TABLE %s ALTER COLUMN %I TYPE %s USING %I::%s, as a role that owns that type''s cast, never as a superuser) or drops the table',
	c.oid::pg_catalog.regclass, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),
	c.oid::pg_catalog.regclass, a.attname, coalesce(e.type, 'text'), a.attname, coalesce(e.base, 'text'))
	FROM pg_catalog.pg_namespace n
	JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid
	JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
	LEFT JOIN pg_catalog.pg_type el ON el.oid = t.typelem AND t.typelem <> 0
	LEFT JOIN (SELECT x.rel, x.name, pg_catalog.regexp_replace(x.def, ' NOT NULL.*$', '') AS type, pg_catalog.regexp_replace(x.def, '( COLLATE .*)?( NOT NULL.*)?$', '') AS base
	           FROM (VALUES ` + inventoryExpected + `) x(kind, rel, name, def) WHERE x.kind = 'column') e
	       ON e.rel = pg_catalog.format('%I.%I', 'fencegate', c.relname) AND e.name = pg_catalog.format('%I', a.attname)
	WHERE n.nspname = 'fencegate' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
	  AND (t.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace OR t.typtype = 'd'
	       OR el.typnamespace <> 'pg_catalog'::pg_catalog.regnamespace OR el.typtype = 'd')
	ORDER BY c.oid::pg_catalog.regclass::pg_catalog.text, a.attnum`

// refuseForeignColumnTypes fails with ErrUnexpectedObjects naming every
// column of a table or view of schema fencegate whose type is not built in
// (foreignColumnTypesSQL). It runs before Install changes anything on the
// schema's objects, because sql/schema.sql converts version 1's resource
// column (ALTER COLUMN ... TYPE text COLLATE "C"): the conversion of a type
// the application made calls the application's cast function once per row
// (and a domain's its CHECK constraints), in the installing session, where
// SET ROLE is no boundary (the function can RESET ROLE). A column of a
// built-in type converts with built-in code only; nobody but a superuser
// can add a cast between two built-in types.
func refuseForeignColumnTypes(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, foreignColumnTypesSQL)
	if err != nil {
		return fmt.Errorf("read the types of the schema's columns: %w", classify(err))
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read the types of the schema's columns: %w", classify(err))
	}
	if len(found) > 0 {
		return fmt.Errorf("%w; nothing was changed:\n%s", ErrUnexpectedObjects, strings.Join(found, "\n"))
	}
	return nil
}
