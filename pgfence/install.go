package pgfence

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// InstallOptions configures Install.
type InstallOptions struct {
	// OwnerRole owns schema fencegate, the marks and the functions; the
	// fence runs with its rights. It must not be able to log in and must
	// not be a superuser; Install creates it (NOLOGIN) when it is missing.
	// The default is the schema's current owner when the schema exists and
	// that role can neither log in nor is a superuser, else
	// DefaultOwnerRole ("fencegate_owner").
	OwnerRole string
	// Grant names application roles to receive what taking fences needs:
	// USAGE on schema fencegate, EXECUTE on fencegate.fence,
	// fencegate.fence_many and fencegate.effect, SELECT on fencegate.marks.
	// Nothing else; their tables' grants are theirs to give. The default is
	// none.
	Grant []string
	// Relay names roles to receive what a relay needs: USAGE on schema
	// fencegate and EXECUTE on fencegate.effect_claim, effect_record,
	// effect_stats and effect_prune. Nothing else: no right on any table,
	// no fence. The default is none.
	Relay []string
	// GuardDDL installs the DDL guard: event triggers that refuse DDL on
	// protected tables (and on the types of their columns) by roles outside
	// OwnerRole, and give partitions and inheritance children created later
	// their statement-level checks. It needs a superuser. The default is
	// false; a guard installed earlier stays (and is refreshed when a
	// superuser installs).
	GuardDDL bool
	// RequireInstalled makes Install fail with ErrNotInstalled, changing
	// nothing, when the database holds no fencegate schema (the upgrade
	// command). The default is false: install from scratch.
	RequireInstalled bool
	// AllowNewerServer lets Install go on against a PostgreSQL major newer
	// than MaxMajor, which no suite has run on. The default is false:
	// ErrUntestedServer. A major older than MinMajor is always refused
	// (ErrUnsupportedServer).
	AllowNewerServer bool
}

// Report says what Install found and did.
type Report struct {
	FromVersion int      // version found: 0 none, 1 the proxy's earlier schema, 2 this one
	ToVersion   int      // SchemaVersion
	OwnerRole   string   // the role that owns schema fencegate now
	Actions     []string // each change made, one line each; empty when there was nothing to do
	AppRoles    []string // roles that may take fences (EXECUTE on fencegate.fence)
	Granted     []string // application roles this install granted (each also one line of Actions)
	Marks       int64    // marks in the database after the install (all kept)
	Tables      int      // tables of protected hierarchies whose checks were verified
	GuardDDL    bool     // the DDL guard is installed
	Warnings    []string // things that work but weaken the guarantees
	Server      ServerVersion
}

// Install installs or upgrades schema fencegate in the database conn is
// connected to, in one transaction, and returns what it did. It is
// idempotent: on a current, unaltered schema it changes nothing. An upgrade
// keeps every mark; from version 1 it hands the schema to the owner role and
// leaves the former owner (the application role) with only the application
// grants. An altered schema is repaired: functions put back, unexpected
// functions and overloads dropped, privileges beyond the application grants
// revoked, the checks of every protected table restored.
//
// It needs a superuser, or a member of the owner role (with CREATE on the
// database when the schema is missing); GuardDDL needs a superuser. Code
// already in schema fencegate is never run before it has been replaced, and
// no code an application wrote is run at all: the transaction's search_path
// is pg_catalog, pg_temp (see AdminSession), and before it changes the
// schema's objects Install refuses (ErrUnexpectedObjects) a column of a
// type that is not built in, whose conversion would call the application's
// cast (SET ROLE is no boundary in a superuser's session). Installs run one at a time
// (under a lock on fencegate.marks that applications cannot take, see
// lockInstall); each lock wait is bounded by RepairLockTimeout, after which
// Install fails with ErrLocked naming the sessions that held the locks.
func Install(ctx context.Context, conn *pgx.Conn, opts InstallOptions) (*Report, error) {
	for _, g := range append(slices.Clone(opts.Grant), opts.Relay...) {
		if g == "" {
			return nil, fmt.Errorf("%w: empty role name to grant", ErrBadInput)
		}
	}
	tx, err := beginAdmin(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("install fencegate schema: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	rep, err := install(ctx, tx, opts)
	if err != nil {
		tx.Rollback(ctx) //nolint:errcheck // the error that matters is err
		return nil, lockTimedOut(ctx, conn, "install fencegate schema", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("install fencegate schema: commit: %w", classify(err))
	}
	return rep, nil
}

// install is Install inside its transaction, whose search_path is pinned.
func install(ctx context.Context, tx pgx.Tx, opts InstallOptions) (*Report, error) {
	if err := limitLockWaits(ctx, tx); err != nil {
		return nil, fmt.Errorf("install fencegate schema: %w", err)
	}
	server, err := ReadServerVersion(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("install fencegate schema: %w", err)
	}
	if err := server.Check(opts.AllowNewerServer); err != nil {
		return nil, fmt.Errorf("install fencegate schema: %w", err)
	}
	if err := lockInstall(ctx, tx); err != nil {
		return nil, fmt.Errorf("install fencegate schema: %w", err)
	}
	owner := opts.OwnerRole
	if owner == "" {
		var current *string
		err := tx.QueryRow(ctx, `SELECT r.rolname::pg_catalog.text FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
			WHERE n.nspname = 'fencegate' AND NOT r.rolcanlogin AND NOT r.rolsuper`).Scan(&current)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("install fencegate schema: read the schema's owner: %w", classify(err))
		}
		owner = DefaultOwnerRole
		if current != nil {
			owner = *current
		}
	}
	for _, g := range opts.Grant {
		if g == owner {
			return nil, fmt.Errorf("%w: the owner role %s cannot be an application role", ErrBadInput, owner)
		}
	}
	for _, g := range opts.Relay {
		if g == owner {
			return nil, fmt.Errorf("%w: the owner role %s cannot be a relay role", ErrBadInput, owner)
		}
		if slices.Contains(opts.Grant, g) {
			return nil, fmt.Errorf("%w: role %s cannot be both an application role and a relay role: a relay reads every effect's payload", ErrBadInput, g)
		}
	}
	in := &installer{tx: tx, owner: owner, opts: opts, rep: &Report{ToVersion: SchemaVersion, OwnerRole: owner, Server: server}}
	if err := in.run(ctx); err != nil {
		return nil, err
	}
	return in.rep, nil
}

type installer struct {
	tx    pgx.Tx
	owner string
	opts  InstallOptions
	rep   *Report

	me          string
	super       bool
	createRole  bool
	createInDB  bool
	schema      bool   // schema fencegate exists
	formerOwner string // owner of the schema before, when not the owner role
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

func (in *installer) exec(ctx context.Context, what, sql string, args ...any) error {
	if _, err := in.tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("install fencegate schema: %s: %w", what, classify(err))
	}
	return nil
}

func (in *installer) did(format string, args ...any) {
	in.rep.Actions = append(in.rep.Actions, fmt.Sprintf(format, args...))
}

func (in *installer) run(ctx context.Context) error {
	if err := in.tx.QueryRow(ctx, `SELECT current_user, r.rolsuper, r.rolcreaterole,
		pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE')
		FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`).Scan(&in.me, &in.super, &in.createRole, &in.createInDB); err != nil {
		return fmt.Errorf("install fencegate schema: read the connected role: %w", classify(err))
	}
	if in.opts.GuardDDL && !in.super {
		return fmt.Errorf("%w: the DDL guard is made of event triggers, which only a superuser may create; role %s is not one", ErrPrivilege, in.me)
	}
	if err := in.detect(ctx); err != nil {
		return err
	}
	if err := in.ensureOwner(ctx); err != nil {
		return err
	}
	planted, err := dropPlantedTables(ctx, in.tx, in.rep.FromVersion)
	if err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	in.rep.Actions = append(in.rep.Actions, planted...)
	if err := refuseUnexpectedRelations(ctx, in.tx); err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	// Before anything changes the schema's objects: converting a column of
	// the application's type runs the application's code (see
	// refuseForeignColumnTypes).
	if err := refuseForeignColumnTypes(ctx, in.tx); err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	if err := in.ensureSchema(ctx); err != nil {
		return err
	}
	if err := in.cleanFunctions(ctx); err != nil {
		return err
	}
	early, err := removePlantedCode(ctx, in.tx)
	if err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	in.rep.Actions = append(in.rep.Actions, early...)
	if err := in.exec(ctx, "become the owner role", "SET LOCAL ROLE "+ident(in.owner)); err != nil {
		return err
	}
	if _, err := in.tx.Exec(ctx, schemaSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("install fencegate schema: create the schema's objects: %w", classify(err))
	}
	if err := in.exec(ctx, "reset role", "RESET ROLE"); err != nil {
		return err
	}
	if in.rep.FromVersion != SchemaVersion {
		in.did("installed schema fencegate version %d", SchemaVersion)
	}
	if err := in.cleanTables(ctx); err != nil {
		return err
	}
	removed, err := removeUnexpected(ctx, in.tx)
	if err != nil {
		return fmt.Errorf("install fencegate schema: %w", err)
	}
	in.rep.Actions = append(in.rep.Actions, removed...)
	if err := in.privileges(ctx); err != nil {
		return err
	}
	if err := in.reshape(ctx); err != nil {
		return err
	}
	if err := in.guard(ctx); err != nil {
		return err
	}
	return in.summarize(ctx)
}

var versionBodyRE = regexp.MustCompile(`^\s*SELECT\s+(\d+)\s*$`)

// detect finds the installed version without running any code of the
// schema (code there may have been replaced by whoever owns it).
func (in *installer) detect(ctx context.Context) error {
	var nspOwner, versionBody *string
	var hasV1, hasMarks bool
	err := in.tx.QueryRow(ctx, `SELECT n.nspowner::pg_catalog.regrole::pg_catalog.text,
		(SELECT p.prosrc FROM pg_catalog.pg_proc p WHERE p.oid = pg_catalog.to_regprocedure('fencegate.schema_version()')),
		pg_catalog.to_regprocedure('fencegate.schema_v1()') IS NOT NULL,
		pg_catalog.to_regclass('fencegate.marks') IS NOT NULL
		FROM (SELECT 1) one LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = 'fencegate'`).Scan(&nspOwner, &versionBody, &hasV1, &hasMarks)
	if err != nil {
		return fmt.Errorf("install fencegate schema: read the installed version: %w", classify(err))
	}
	in.schema = nspOwner != nil
	switch {
	case versionBody != nil:
		m := versionBodyRE.FindStringSubmatch(*versionBody)
		if m == nil {
			// Altered beyond recognition: repair as the current version.
			in.rep.FromVersion = SchemaVersion
			break
		}
		v, _ := strconv.Atoi(m[1])
		in.rep.FromVersion = v
	case hasV1 || hasMarks:
		in.rep.FromVersion = 1
	}
	if in.rep.FromVersion > SchemaVersion {
		return fmt.Errorf("%w: the database holds version %d, this fencegate installs version %d; nothing was changed", ErrNewerSchema, in.rep.FromVersion, SchemaVersion)
	}
	if in.opts.RequireInstalled && !in.schema {
		return ErrNotInstalled
	}
	if in.schema && *nspOwner != in.owner {
		in.formerOwner = *nspOwner
	}
	return nil
}

func (in *installer) ensureOwner(ctx context.Context) error {
	var canLogin, super bool
	err := in.tx.QueryRow(ctx, "SELECT rolcanlogin, rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1", in.owner).Scan(&canLogin, &super)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if !in.super && !in.createRole {
			return fmt.Errorf("%w: the owner role %s does not exist, and creating it needs a superuser or CREATEROLE; role %s has neither", ErrPrivilege, in.owner, in.me)
		}
		if err := in.exec(ctx, "create the owner role", "CREATE ROLE "+ident(in.owner)+" NOLOGIN"); err != nil {
			return err
		}
		in.did("created role %s (NOLOGIN) to own schema fencegate", in.owner)
		if !in.super {
			if err := in.exec(ctx, "join the owner role", "GRANT "+ident(in.owner)+" TO "+ident(in.me)); err != nil {
				return err
			}
			in.did("made role %s a member of %s", in.me, in.owner)
		}
		return nil
	case err != nil:
		return fmt.Errorf("install fencegate schema: read the owner role: %w", classify(err))
	}
	if canLogin || super {
		what := "can log in"
		if super {
			what = "is a superuser"
		}
		return fmt.Errorf("%w: role %s %s; the owner of schema fencegate must be a role nobody can log in as (ALTER ROLE %s NOLOGIN NOSUPERUSER, or choose another owner role)", ErrOwnerRole, in.owner, what, in.owner)
	}
	if !in.super {
		var member bool
		if err := in.tx.QueryRow(ctx, "SELECT pg_catalog.pg_has_role(current_user, $1::pg_catalog.text::pg_catalog.regrole, 'MEMBER')", in.owner).Scan(&member); err != nil {
			return fmt.Errorf("install fencegate schema: %w", classify(err))
		}
		if !member {
			return fmt.Errorf("%w: installing needs a superuser or a member of the owner role %s; role %s is neither", ErrPrivilege, in.owner, in.me)
		}
	}
	return nil
}

func (in *installer) ensureSchema(ctx context.Context) error {
	if !in.schema {
		if !in.super && !in.createInDB {
			return fmt.Errorf("%w: creating schema fencegate needs CREATE on the database; role %s lacks it", ErrPrivilege, in.me)
		}
		if err := in.exec(ctx, "create schema fencegate", "CREATE SCHEMA fencegate AUTHORIZATION "+ident(in.owner)); err != nil {
			if pgCode(err) == "23505" { // unique_violation: see lockInstall
				return fmt.Errorf("install fencegate schema: another install created schema fencegate meanwhile; run this one again: %w", err)
			}
			return err
		}
		in.did("created schema fencegate owned by %s", in.owner)
		return nil
	}
	if in.formerOwner != "" {
		if err := in.exec(ctx, "hand schema fencegate to the owner role", "ALTER SCHEMA fencegate OWNER TO "+ident(in.owner)); err != nil {
			return err
		}
		in.did("handed schema fencegate from %s to %s", in.formerOwner, in.owner)
	}
	// Relations first (a table's owned sequences follow it), then what is
	// left.
	rows, err := in.tx.Query(ctx, `SELECT c.oid::pg_catalog.regclass::pg_catalog.text, c.relkind::pg_catalog.text, c.relowner::pg_catalog.regrole::pg_catalog.text FROM pg_catalog.pg_class c
		WHERE c.relnamespace = 'fencegate'::pg_catalog.regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
		  AND c.relowner <> $1::pg_catalog.text::pg_catalog.regrole
		ORDER BY c.relkind = 'S', c.oid`, in.owner)
	if err != nil {
		return fmt.Errorf("install fencegate schema: list the schema's relations: %w", classify(err))
	}
	type rel struct{ name, kind, owner string }
	var rels []rel
	for rows.Next() {
		var r rel
		if err := rows.Scan(&r.name, &r.kind, &r.owner); err != nil {
			return fmt.Errorf("install fencegate schema: %w", err)
		}
		rels = append(rels, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("install fencegate schema: list the schema's relations: %w", classify(err))
	}
	for _, r := range rels {
		kind := map[string]string{"v": "VIEW", "m": "MATERIALIZED VIEW", "f": "FOREIGN TABLE", "S": "SEQUENCE"}[r.kind]
		if kind == "" {
			kind = "TABLE"
		}
		if kind == "SEQUENCE" {
			var still bool
			if err := in.tx.QueryRow(ctx, "SELECT relowner <> $2::pg_catalog.text::pg_catalog.regrole FROM pg_catalog.pg_class WHERE oid = $1::pg_catalog.regclass", r.name, in.owner).Scan(&still); err != nil || !still {
				continue
			}
		}
		if err := in.exec(ctx, "hand "+r.name+" to the owner role", "ALTER "+kind+" "+r.name+" OWNER TO "+ident(in.owner)); err != nil {
			return err
		}
		in.did("handed %s from %s to %s", r.name, r.owner, in.owner)
	}
	return nil
}

// cleanFunctions drops what does not belong in schema fencegate (overloads,
// additions, version 1 leftovers, functions whose signature changed) and
// hands the expected functions back to the owner role.
func (in *installer) cleanFunctions(ctx context.Context) error {
	rows, err := in.tx.Query(ctx, `SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text, p.proname::pg_catalog.text,
		pg_catalog.pg_get_function_identity_arguments(p.oid), pg_catalog.pg_get_function_result(p.oid),
		p.proowner::pg_catalog.regrole::pg_catalog.text, r.rolsuper, p.prokind::pg_catalog.text
		FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
		WHERE p.pronamespace = 'fencegate'::pg_catalog.regnamespace ORDER BY p.oid`)
	if err != nil {
		return fmt.Errorf("install fencegate schema: list the schema's functions: %w", classify(err))
	}
	type fn struct {
		sig, name, args, result, owner string
		ownerSuper                     bool
		kind                           string
	}
	var fns []fn
	for rows.Next() {
		var f fn
		if err := rows.Scan(&f.sig, &f.name, &f.args, &f.result, &f.owner, &f.ownerSuper, &f.kind); err != nil {
			return fmt.Errorf("install fencegate schema: %w", err)
		}
		fns = append(fns, f)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("install fencegate schema: list the schema's functions: %w", classify(err))
	}
	for _, f := range fns {
		want := lookupFunction(f.name, f.args)
		drop := ""
		switch {
		case f.name == "fence_alone" || f.name == "schema_v1":
			drop = "dropped %s (version 1; no longer has a job)"
		case want == nil:
			drop = "dropped %s (not part of schema fencegate)"
		case f.kind != "f" || f.args != want.args || f.result != want.result:
			drop = "dropped %s (an overload or a changed signature)"
		case want.guard && !f.ownerSuper:
			drop = "dropped %s (a DDL guard function must belong to a superuser)"
		}
		if drop != "" {
			kind := map[string]string{"p": "PROCEDURE", "a": "AGGREGATE"}[f.kind]
			if kind == "" {
				kind = "FUNCTION"
			}
			if err := in.exec(ctx, "drop "+f.sig, "DROP "+kind+" "+f.sig+" CASCADE"); err != nil {
				return err
			}
			in.did(drop, "fencegate."+strings.TrimPrefix(f.sig, "fencegate."))
			continue
		}
		if !want.guard && f.owner != in.owner {
			if err := in.exec(ctx, "hand "+f.sig+" to the owner role", "ALTER FUNCTION "+f.sig+" OWNER TO "+ident(in.owner)); err != nil {
				return err
			}
			in.did("handed %s from %s to %s", f.sig, f.owner, in.owner)
		}
	}
	return nil
}

// cleanTables drops what does not belong on the marks, the audit and the
// signing keys:
// triggers, rules, policies, row-level security.
func (in *installer) cleanTables(ctx context.Context) error {
	rows, err := in.tx.Query(ctx, `SELECT pg_catalog.format('DROP TRIGGER %I ON %s', t.tgname, t.tgrelid::pg_catalog.regclass), pg_catalog.format('dropped trigger %s on %s', t.tgname, t.tgrelid::pg_catalog.regclass)
		FROM pg_catalog.pg_trigger t WHERE t.tgrelid IN ('fencegate.marks'::pg_catalog.regclass, 'fencegate.audit'::pg_catalog.regclass, 'fencegate.signing_keys'::pg_catalog.regclass, 'fencegate.effects'::pg_catalog.regclass) AND NOT t.tgisinternal
		UNION ALL
		SELECT pg_catalog.format('DROP RULE %I ON %s', r.rulename, r.ev_class::pg_catalog.regclass), pg_catalog.format('dropped rule %s on %s', r.rulename, r.ev_class::pg_catalog.regclass)
		FROM pg_catalog.pg_rewrite r WHERE r.ev_class IN ('fencegate.marks'::pg_catalog.regclass, 'fencegate.audit'::pg_catalog.regclass, 'fencegate.signing_keys'::pg_catalog.regclass, 'fencegate.effects'::pg_catalog.regclass)
		UNION ALL
		SELECT pg_catalog.format('DROP POLICY %I ON %s', p.polname, p.polrelid::pg_catalog.regclass), pg_catalog.format('dropped policy %s on %s', p.polname, p.polrelid::pg_catalog.regclass)
		FROM pg_catalog.pg_policy p WHERE p.polrelid IN ('fencegate.marks'::pg_catalog.regclass, 'fencegate.audit'::pg_catalog.regclass, 'fencegate.signing_keys'::pg_catalog.regclass, 'fencegate.effects'::pg_catalog.regclass)
		UNION ALL
		SELECT pg_catalog.format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY', c.oid::pg_catalog.regclass), pg_catalog.format('disabled row-level security on %s', c.oid::pg_catalog.regclass)
		FROM pg_catalog.pg_class c WHERE c.oid IN ('fencegate.marks'::pg_catalog.regclass, 'fencegate.audit'::pg_catalog.regclass, 'fencegate.signing_keys'::pg_catalog.regclass, 'fencegate.effects'::pg_catalog.regclass) AND (c.relrowsecurity OR c.relforcerowsecurity)`)
	if err != nil {
		return fmt.Errorf("install fencegate schema: inspect the marks: %w", classify(err))
	}
	fixes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var f [2]string
		err := r.Scan(&f[0], &f[1])
		return f, err
	})
	if err != nil {
		return fmt.Errorf("install fencegate schema: inspect the marks: %w", classify(err))
	}
	for _, f := range fixes {
		if err := in.exec(ctx, f[1], f[0]); err != nil {
			return err
		}
		in.did("%s", f[1])
	}
	return nil
}

// lookupFunction finds the function of this version named name, taking
// args when there is one, else another of that name (an overload) or nil.
func lookupFunction(name, args string) *function {
	var same *function
	for _, f := range functions {
		if f.name == name && f.args == args {
			return f
		}
		if f.name == name && same == nil {
			same = f
		}
	}
	return same
}

// privileges leaves every role with at most the application grants (USAGE
// on the schema, EXECUTE on the two fence functions, SELECT on the marks)
// and SELECT on the audit, revokes everything from PUBLIC, and grants the
// application set to the roles asked for and to a former owner.
func (in *installer) privileges(ctx context.Context) error {
	rows, err := in.tx.Query(ctx, `
		WITH acl AS (
			SELECT 'schema'::pg_catalog.text AS obj, (pg_catalog.aclexplode(n.nspacl)).* FROM pg_catalog.pg_namespace n WHERE n.nspname = 'fencegate'
			UNION ALL
			SELECT c.relname::pg_catalog.text, (pg_catalog.aclexplode(c.relacl)).* FROM pg_catalog.pg_class c WHERE c.relnamespace = 'fencegate'::pg_catalog.regnamespace
			UNION ALL
			SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text, (pg_catalog.aclexplode(p.proacl)).* FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'fencegate'::pg_catalog.regnamespace
		)
		SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END,
		       pg_catalog.bool_or(a.obj = 'schema' AND a.privilege_type = 'USAGE'),
		       pg_catalog.bool_or(a.obj = 'marks' AND a.privilege_type = 'SELECT'),
		       pg_catalog.bool_or(a.obj = 'audit' AND a.privilege_type = 'SELECT'),
		       pg_catalog.bool_or(a.obj IN ('fencegate.fence(text,bigint)', 'fencegate.fence(text,bigint,text)') AND a.privilege_type = 'EXECUTE'),
		       pg_catalog.bool_or(a.obj = 'fencegate.fence_many(text[],bigint)' AND a.privilege_type = 'EXECUTE'),
		       pg_catalog.bool_or(a.obj = 'fencegate.check_row()' AND a.privilege_type = 'EXECUTE'),
		       pg_catalog.bool_or(a.obj = 'fencegate.effect(text,text,jsonb)' AND a.privilege_type = 'EXECUTE'),
		       pg_catalog.bool_or(a.obj LIKE 'fencegate.effect\_%' AND a.privilege_type = 'EXECUTE'),
		       pg_catalog.array_agg(DISTINCT a.privilege_type || ' on ' || a.obj) FILTER (WHERE NOT (
		           (a.obj = 'schema' AND a.privilege_type = 'USAGE') OR
		           (a.obj IN ('marks', 'audit') AND a.privilege_type = 'SELECT') OR
		           (a.obj IN ('fencegate.fence(text,bigint)', 'fencegate.fence(text,bigint,text)', 'fencegate.fence_many(text[],bigint)', 'fencegate.check_row()', 'fencegate.effect(text,text,jsonb)') AND a.privilege_type = 'EXECUTE') OR
		           (a.obj LIKE 'fencegate.effect\_%' AND a.privilege_type = 'EXECUTE')))
		FROM acl a
		JOIN pg_catalog.pg_namespace n ON n.nspname = 'fencegate'
		WHERE a.grantee <> n.nspowner AND NOT (a.grantee <> 0 AND EXISTS (
			SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_roles r ON r.oid = p.proowner AND r.rolsuper
			WHERE p.oid::pg_catalog.regprocedure::pg_catalog.text = a.obj AND p.proowner = a.grantee))
		GROUP BY a.grantee ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("install fencegate schema: read the schema's privileges: %w", classify(err))
	}
	type grantee struct {
		name                                  string
		usage, marks, audit, fence, fenceMany bool
		checkRow, effect, relay               bool
		extra                                 []string
	}
	var gs []grantee
	for rows.Next() {
		var g grantee
		if err := rows.Scan(&g.name, &g.usage, &g.marks, &g.audit, &g.fence, &g.fenceMany, &g.checkRow, &g.effect, &g.relay, &g.extra); err != nil {
			return fmt.Errorf("install fencegate schema: %w", err)
		}
		gs = append(gs, g)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("install fencegate schema: read the schema's privileges: %w", classify(err))
	}
	// CASCADE: what a grantee passed on under a grant option goes with it
	// (else PostgreSQL refuses, "dependent privileges exist", and nothing
	// is repaired). The application grants are given again below, by the
	// installing role, so no cascade takes them.
	revoke := func(who string) error {
		for _, what := range []string{"SCHEMA fencegate", "ALL TABLES IN SCHEMA fencegate", "ALL SEQUENCES IN SCHEMA fencegate", "ALL FUNCTIONS IN SCHEMA fencegate"} {
			if err := in.exec(ctx, "revoke from "+who, "REVOKE ALL ON "+what+" FROM "+who+" CASCADE"); err != nil {
				return err
			}
		}
		return nil
	}
	if err := revoke("PUBLIC"); err != nil {
		return err
	}
	for _, g := range gs {
		if g.name == "PUBLIC" {
			if len(g.extra) > 0 || g.usage || g.marks || g.audit || g.fence || g.fenceMany || g.checkRow || g.effect || g.relay {
				var all []string
				all = append(all, g.extra...)
				in.did("revoked from PUBLIC: %s", strings.Join(all, ", "))
			}
			continue
		}
		if len(g.extra) == 0 {
			continue
		}
		if err := revoke(ident(g.name)); err != nil {
			return err
		}
		in.did("revoked from %s: %s", g.name, strings.Join(g.extra, ", "))
		grants := []string{}
		if g.usage {
			grants = append(grants, "GRANT USAGE ON SCHEMA fencegate TO "+ident(g.name))
		}
		if g.marks {
			grants = append(grants, "GRANT SELECT ON fencegate.marks TO "+ident(g.name))
		}
		if g.audit {
			grants = append(grants, "GRANT SELECT ON fencegate.audit TO "+ident(g.name))
		}
		if g.fence {
			grants = append(grants, "GRANT EXECUTE ON FUNCTION fencegate.fence(text, bigint), fencegate.fence(text, bigint, text) TO "+ident(g.name))
		}
		if g.fenceMany {
			grants = append(grants, "GRANT EXECUTE ON FUNCTION fencegate.fence_many(text[], bigint) TO "+ident(g.name))
		}
		if g.checkRow {
			grants = append(grants, "GRANT EXECUTE ON FUNCTION fencegate.check_row() TO "+ident(g.name))
		}
		if g.effect {
			grants = append(grants, "GRANT EXECUTE ON FUNCTION fencegate.effect(text, text, jsonb) TO "+ident(g.name))
		}
		if g.relay {
			grants = append(grants, "GRANT EXECUTE ON FUNCTION "+relayFunctionSigs+" TO "+ident(g.name))
		}
		for _, q := range grants {
			if err := in.exec(ctx, "keep the grants of "+g.name, q); err != nil {
				return err
			}
		}
	}
	// Roles that may take fences keep every application grant (a change of
	// owner can fold a grant into the old owner's and lose it).
	rows, err = in.tx.Query(ctx, `SELECT DISTINCT a.grantee::pg_catalog.regrole::pg_catalog.text FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
		WHERE p.oid = 'fencegate.fence(text,bigint)'::pg_catalog.regprocedure AND a.grantee <> 0 AND a.grantee <> p.proowner
		  AND a.privilege_type = 'EXECUTE' ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("install fencegate schema: read the application roles: %w", classify(err))
	}
	apps, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("install fencegate schema: read the application roles: %w", classify(err))
	}
	for _, g := range in.opts.Grant {
		if !slices.Contains(apps, g) {
			apps = append(apps, g)
		}
	}
	if in.formerOwner != "" {
		var super bool
		if err := in.tx.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1", in.formerOwner).Scan(&super); err == nil && !super && !slices.Contains(apps, in.formerOwner) {
			apps = append(apps, in.formerOwner)
			in.rep.Warnings = append(in.rep.Warnings, fmt.Sprintf("role %s owned schema fencegate before; it keeps only the application grants (USAGE, EXECUTE on fence and fence_many, SELECT on marks)", in.formerOwner))
		}
	}
	for _, role := range apps {
		var super bool
		var has bool
		err := in.tx.QueryRow(ctx, `SELECT r.rolsuper,
			pg_catalog.has_function_privilege(r.oid, 'fencegate.fence(text,bigint)', 'EXECUTE')
			AND pg_catalog.has_function_privilege(r.oid, 'fencegate.fence(text,bigint,text)', 'EXECUTE')
			AND pg_catalog.has_function_privilege(r.oid, 'fencegate.fence_many(text[],bigint)', 'EXECUTE')
			AND pg_catalog.has_function_privilege(r.oid, 'fencegate.effect(text,text,jsonb)', 'EXECUTE')
			AND pg_catalog.has_table_privilege(r.oid, 'fencegate.marks', 'SELECT')
			AND pg_catalog.has_schema_privilege(r.oid, 'fencegate', 'USAGE')
			FROM pg_catalog.pg_roles r WHERE r.rolname = $1`, role).Scan(&super, &has)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: role %s does not exist; create it first (CREATE ROLE %s LOGIN ...), then grant", ErrNoRole, role, role)
		}
		if err != nil {
			return fmt.Errorf("install fencegate schema: read role %s: %w", role, classify(err))
		}
		r := ident(role)
		for _, q := range []string{
			"GRANT USAGE ON SCHEMA fencegate TO " + r,
			"GRANT EXECUTE ON FUNCTION fencegate.fence(text, bigint), fencegate.fence(text, bigint, text), fencegate.fence_many(text[], bigint), fencegate.effect(text, text, jsonb) TO " + r,
			"GRANT SELECT ON fencegate.marks TO " + r,
		} {
			if err := in.exec(ctx, "grant to "+role, q); err != nil {
				return err
			}
		}
		if !has {
			in.did("granted %s USAGE on schema fencegate, EXECUTE on fence, fence_many and effect, SELECT on marks", role)
			in.rep.Granted = append(in.rep.Granted, role)
		}
		if super {
			in.rep.Warnings = append(in.rep.Warnings, fmt.Sprintf("role %s is a superuser: fences taken by it work, but it can switch every check off; applications should use ordinary roles", role))
		}
	}
	return in.relayGrants(ctx, apps)
}

// relayGrants gives each role of InstallOptions.Relay what a relay needs:
// USAGE on the schema and EXECUTE on the effect_* functions. A role that
// may take fences is refused: a relay reads every effect's payload and
// settles effects, which no application role may.
func (in *installer) relayGrants(ctx context.Context, apps []string) error {
	for _, role := range in.opts.Relay {
		if slices.Contains(apps, role) {
			return fmt.Errorf("%w: role %s is an application role (it may take fences); a relay role must be another role, since a relay reads every effect's payload", ErrBadInput, role)
		}
		var has bool
		err := in.tx.QueryRow(ctx, `SELECT pg_catalog.has_function_privilege(r.oid, 'fencegate.effect_claim(text[],integer)', 'EXECUTE')
			AND pg_catalog.has_schema_privilege(r.oid, 'fencegate', 'USAGE')
			FROM pg_catalog.pg_roles r WHERE r.rolname = $1`, role).Scan(&has)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: role %s does not exist; create it first (CREATE ROLE %s LOGIN ...), then grant", ErrNoRole, role, role)
		}
		if err != nil {
			return fmt.Errorf("install fencegate schema: read role %s: %w", role, classify(err))
		}
		r := ident(role)
		for _, q := range []string{
			"GRANT USAGE ON SCHEMA fencegate TO " + r,
			"GRANT EXECUTE ON FUNCTION " + relayFunctionSigs + " TO " + r,
		} {
			if err := in.exec(ctx, "grant to relay role "+role, q); err != nil {
				return err
			}
		}
		if !has {
			in.did("granted %s USAGE on schema fencegate, EXECUTE on effect_claim, effect_record, effect_stats and effect_prune (a relay)", role)
			in.rep.Granted = append(in.rep.Granted, role)
		}
	}
	return nil
}

// reshape restores the checks of every table of every protected hierarchy
// (it changes nothing where they are in place).
func (in *installer) reshape(ctx context.Context) error {
	rows, err := in.tx.Query(ctx, `SELECT k.relid::pg_catalog.text FROM (`+protectedRootsSQL+`) r, fencegate.tree(r.relid::pg_catalog.regclass) k ORDER BY r.relid, k.depth`)
	if err != nil {
		return fmt.Errorf("install fencegate schema: list protected tables: %w", classify(err))
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("install fencegate schema: list protected tables: %w", classify(err))
	}
	for _, t := range tables {
		var before, after string
		fingerprint := `SELECT coalesce(pg_catalog.string_agg(tgname::pg_catalog.text || ':' || tgenabled::pg_catalog.text || ':' || tgfoid::pg_catalog.text, ',' ORDER BY tgname), '') FROM pg_catalog.pg_trigger WHERE tgrelid = $1::pg_catalog.regclass AND tgname LIKE 'fencegate\_%'`
		if err := in.tx.QueryRow(ctx, fingerprint, t).Scan(&before); err != nil {
			return fmt.Errorf("install fencegate schema: read the checks of %s: %w", t, classify(err))
		}
		if err := in.exec(ctx, "restore the checks of "+t, "SELECT fencegate.shape($1::pg_catalog.regclass)", t); err != nil {
			return err
		}
		if err := in.tx.QueryRow(ctx, fingerprint, t).Scan(&after); err != nil {
			return fmt.Errorf("install fencegate schema: read the checks of %s: %w", t, classify(err))
		}
		if before != after {
			in.did("restored the checks of protected table %s", t)
		}
	}
	in.rep.Tables = len(tables)
	return nil
}

// guard installs or refreshes the DDL guard.
func (in *installer) guard(ctx context.Context) error {
	var present bool
	if err := in.tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname IN ('fencegate_guard_ddl', 'fencegate_guard_drop'))").Scan(&present); err != nil {
		return fmt.Errorf("install fencegate schema: read the DDL guard: %w", classify(err))
	}
	if !in.opts.GuardDDL && !present {
		return nil
	}
	if !in.super {
		in.rep.GuardDDL = present
		in.rep.Warnings = append(in.rep.Warnings, "the DDL guard was left as it is: refreshing it needs a superuser")
		return nil
	}
	var before string
	guardPrint := `SELECT coalesce(pg_catalog.string_agg(e.evtname::pg_catalog.text || e.evtenabled::pg_catalog.text || pg_catalog.md5(p.prosrc), ',' ORDER BY e.evtname), '')
		FROM pg_catalog.pg_event_trigger e JOIN pg_catalog.pg_proc p ON p.oid = e.evtfoid WHERE e.evtname LIKE 'fencegate\_guard\_%'`
	if err := in.tx.QueryRow(ctx, guardPrint).Scan(&before); err != nil {
		return fmt.Errorf("install fencegate schema: read the DDL guard: %w", classify(err))
	}
	if _, err := in.tx.Exec(ctx, guardSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("install fencegate schema: install the DDL guard: %w", classify(err))
	}
	if err := in.exec(ctx, "protect the DDL guard", "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA fencegate FROM PUBLIC"); err != nil {
		return err
	}
	var after string
	if err := in.tx.QueryRow(ctx, guardPrint).Scan(&after); err != nil {
		return fmt.Errorf("install fencegate schema: read the DDL guard: %w", classify(err))
	}
	if before != after {
		in.did("installed the DDL guard (event triggers fencegate_guard_ddl, fencegate_guard_drop)")
	}
	in.rep.GuardDDL = true
	return nil
}

func (in *installer) summarize(ctx context.Context) error {
	if err := in.tx.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM fencegate.marks").Scan(&in.rep.Marks); err != nil {
		return fmt.Errorf("install fencegate schema: count marks: %w", classify(err))
	}
	rows, err := in.tx.Query(ctx, `SELECT r.rolname::pg_catalog.text FROM pg_catalog.pg_roles r
		WHERE pg_catalog.has_function_privilege(r.oid, 'fencegate.fence(text,bigint)', 'EXECUTE') AND NOT r.rolsuper
		  AND r.oid <> (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'fencegate')
		  AND NOT pg_catalog.pg_has_role(r.oid, (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'fencegate'), 'MEMBER')
		  AND EXISTS (SELECT 1 FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a WHERE p.oid = 'fencegate.fence(text,bigint)'::pg_catalog.regprocedure AND a.grantee = r.oid)
		ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("install fencegate schema: list application roles: %w", classify(err))
	}
	in.rep.AppRoles, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("install fencegate schema: list application roles: %w", classify(err))
	}
	rows, err = in.tx.Query(ctx, ownerWarningsSQL)
	if err != nil {
		return fmt.Errorf("install fencegate schema: check table owners: %w", classify(err))
	}
	warns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("install fencegate schema: check table owners: %w", classify(err))
	}
	in.rep.Warnings = append(in.rep.Warnings, warns...)
	return nil
}

// protectedRootsSQL lists the tables protect was called on: those with the
// statement-level INSERT check whose parent (if any) has none.
const protectedRootsSQL = protectedRootsByIdentitySQL

// ownerWarningsSQL names each protected table (a permanent table whose
// trigger calls fencegate.check_insert() itself, by identity as in
// protectedRootsByIdentitySQL: partitions carry a clone) whose owner can
// log in. A table with a trigger merely named fencegate_ins is not one.
const ownerWarningsSQL = `SELECT pg_catalog.format('protected table %s is owned by role %s, which can log in: the owner can drop or disable its checks; give it to a role that cannot log in', c.oid::pg_catalog.regclass, r.rolname)
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
	WHERE r.rolcanlogin AND c.relpersistence <> 't'
	  AND EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid AND t.tgfoid = ` + checkInsertOIDSQL + `)
	ORDER BY 1`
