package pgfence_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Admin sessions never run application code.
//
// The application role may create in schema public and owns the database,
// so it sets the database's search_path to public, pg_catalog and plants, in
// public, a copy of every catalog function, operator, aggregate, type and
// relation whose name appears in the statements the admin code sends (the
// list is generated from those statements, recorded in a clean database
// first, so a new call is covered without editing this test). Each copy
// raises a WARNING naming itself when it runs, and records itself in
// public.fg_ran. The administrator's own session also plants copies in its
// pg_temp. Then the administrator installs, protects, sets and reads marks,
// repairs an altered schema, requires signed tokens, reads the status and
// unprotects: everything must work, and no planted object may run.
func TestAdminRunsNoPlantedCode(t *testing.T) {
	if testing.Short() {
		t.Skip("plants some 700 objects in three databases (about 15 s); run without -short")
	}
	ctx := context.Background()

	// A clean run records what the admin code sends.
	clean := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	var sent sqlLog
	if err := adminWorkload(t, clean, adminConn(t, clean.DSN, &sent, nil), adminConn(t, clean.DSN, &sent, nil)); err != nil {
		t.Fatalf("in a clean database: %v", err)
	}
	words := sent.words()

	hostile := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	name := pgx.Identifier{dbName(t, hostile.DSN)}.Sanitize()
	hostile.Exec(t, "ALTER DATABASE "+name+" OWNER TO "+hostile.App)
	t.Cleanup(func() { hostile.Exec(t, "ALTER DATABASE "+name+" OWNER TO CURRENT_USER") })
	hostile.Exec(t, "GRANT CREATE ON SCHEMA public TO "+hostile.App)
	app := hostile.AppConn(t)
	for _, q := range []string{
		"ALTER DATABASE " + name + " SET search_path = public, pg_catalog",
		plantedLogSQL,
	} {
		if _, err := app.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	planted := plant(t, app, "public", words)
	t.Logf("planted %d objects in public", len(planted))

	var notices noticeLog
	var again sqlLog
	a := adminConn(t, hostile.DSN, &again, &notices)
	b := adminConn(t, hostile.DSN, &again, &notices)
	// The administrator's own temporary schema: listed last in the pinned
	// path, searched for relations and types after pg_catalog, never for
	// functions and operators.
	plant(t, a, "pg_temp", words)
	plant(t, b, "pg_temp", words)
	again.reset()
	werr := adminWorkload(t, hostile, a, b)

	if ran := notices.planted(); len(ran) > 0 {
		t.Errorf("the admin code ran %d planted objects:\n%s", len(ran), strings.Join(ran, "\n"))
	}
	var logged []string
	rows, err := app.Query(ctx, "SELECT what || ' as ' || role FROM public.fg_ran ORDER BY what")
	if err != nil {
		t.Fatal(err)
	}
	if logged, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(logged) > 0 {
		t.Errorf("public.fg_ran records planted code run by the admin code:\n%s", strings.Join(logged, "\n"))
	}
	if werr != nil {
		t.Fatalf("in the hostile database: %v", werr)
	}
	// Every catalog name the admin code sent in the hostile database had a
	// planted copy (or cannot have one).
	var fresh []string
	for _, w := range again.words() {
		if !slices.Contains(words, w) {
			fresh = append(fresh, w)
		}
	}
	rows, err = app.Query(ctx, `SELECT DISTINCT w FROM pg_catalog.unnest($1::pg_catalog.text[]) w WHERE
		EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.proname::pg_catalog.text = w AND p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace)
		OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relname::pg_catalog.text = w AND c.relnamespace = 'pg_catalog'::pg_catalog.regnamespace)
		OR EXISTS (SELECT 1 FROM pg_catalog.pg_type y WHERE y.typname::pg_catalog.text = w AND y.typnamespace = 'pg_catalog'::pg_catalog.regnamespace)
		OR EXISTS (SELECT 1 FROM pg_catalog.pg_operator o WHERE o.oprname::pg_catalog.text = w)`, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if fresh, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(fresh) > 0 {
		t.Errorf("the admin code sent catalog names in the hostile database that the clean run did not, so nothing was planted for them: %s", strings.Join(fresh, ", "))
	}
	var missing []string
	rows, err = app.Query(ctx, `SELECT DISTINCT p.proname::text FROM pg_catalog.pg_proc p
		WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace AND p.proname::text = ANY ($1::pg_catalog.text[])
		  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc q WHERE q.pronamespace = 'public'::pg_catalog.regnamespace AND q.proname = p.proname)
		ORDER BY 1`, words)
	if err != nil {
		t.Fatal(err)
	}
	if missing, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	missing = slices.DeleteFunc(missing, func(s string) bool { return unplantable[s] })
	if len(missing) > 0 {
		t.Errorf("catalog functions the admin code names that have no planted copy (plant one, or list it in unplantable with the reason): %s", strings.Join(missing, ", "))
	}
}

// unplantable lists catalog functions named in the admin code's statements
// that get no planted copy: those whose every signature takes or returns a
// pseudo-type ("any", anyelement, internal, trigger, record ...), which only
// C functions may, so that an application cannot make a copy a call would
// prefer; aggregates other than those planted by hand above (count,
// bool_or, every, string_agg, array_agg); and words that are function names
// only by coincidence (a column, a keyword).
var unplantable = map[string]bool{
	"anytextcat": true, "textanycat": true, // text || anynonarray: a pseudo-type argument
	"array_subscript_handler": true, "system": true, // internal arguments; "system" is also a word of the messages
	// An aggregate over anyelement; here the column pg_locks.mode.
	"mode":     true,
	"coalesce": true, "greatest": true, "least": true, "nullif": true, // keywords, not functions
	"concat": true, "concat_ws": true, "num_nonnulls": true, "num_nulls": true, "jsonb_build_object": true,
	"json_build_object": true, "pg_typeof": true, "row_to_json": true, "to_json": true, "to_jsonb": true,
	"array_length": true, "array_position": true, "array_positions": true, "array_remove": true,
	"array_append": true, "array_prepend": true, "array_cat": true, "cardinality": true, "array_to_string": true,
	"array_lower": true, "array_upper": true, "array_ndims": true, "array_dims": true, "array_fill": true,
	"unnest": true, "generate_subscripts": true, "trim_array": true, "array_in": true, "array_out": true,
	"max": true, "min": true, "row_number": true, "rank": true, "first_value": true, "last_value": true,
	"pg_advisory_xact_lock": true, // returns void, a pseudo-type
	"pg_notify":             true, // returns void; called only inside fencegate.effect, whose search_path is pinned
}

// plantedLogSQL creates what every planted object calls: a WARNING and a
// row in public.fg_ran, written as the application role.
const plantedLogSQL = `
CREATE TABLE public.fg_ran (what pg_catalog.text, role pg_catalog.text, pid pg_catalog.int4);
CREATE FUNCTION public.fg_planted(what pg_catalog.text) RETURNS pg_catalog.bool
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
	RAISE WARNING 'fg-planted ran: % (as %)', what, session_user;
	INSERT INTO public.fg_ran VALUES (what, session_user, pg_backend_pid());
	RETURN true;
END $f$;
GRANT EXECUTE ON FUNCTION public.fg_planted(pg_catalog.text) TO PUBLIC;
`

// plant creates in schema (public or pg_temp), through conn, a copy of
// every catalog function, aggregate, operator, type and relation named in
// words; each copy calls public.fg_planted when it runs and otherwise
// behaves as the original. It returns what it created.
func plant(t *testing.T, conn *pgx.Conn, schema string, words []string) []string {
	t.Helper()
	ctx := context.Background()
	// Plant under a path of pg_catalog alone (the session's own path, the
	// database's, may already lead to planted types), then put it back.
	var path string
	if err := conn.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET search_path = pg_catalog"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := conn.Exec(ctx, "SELECT pg_catalog.set_config('search_path', $1, false)", path); err != nil {
			t.Fatal(err)
		}
	}()
	var made []string
	try := func(what, sql string) {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Logf("cannot plant %s: %v", what, pgMessage(err))
			return
		}
		made = append(made, what)
	}
	// Functions: every signature without pseudo-types.
	rows, err := conn.Query(ctx, `SELECT p.proname::pg_catalog.text,
		pg_catalog.array_to_string(ARRAY(SELECT pg_catalog.format_type(a, NULL) FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) a), ', '),
		pg_catalog.format_type(p.prorettype, NULL), p.proretset, p.pronargs
		FROM pg_catalog.pg_proc p
		WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace AND p.prokind = 'f' AND p.proname::pg_catalog.text = ANY ($1::pg_catalog.text[])
		  AND p.provariadic = 0
		  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type y WHERE y.typtype = 'p'
		                  AND (y.oid = p.prorettype OR y.oid = ANY (p.proargtypes::pg_catalog.oid[])))
		ORDER BY 1, 2`, words)
	if err != nil {
		t.Fatal(err)
	}
	type fn struct {
		name, args, ret string
		set             bool
		n               int16
	}
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		err := r.Scan(&f.name, &f.args, &f.ret, &f.set, &f.n)
		return f, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		var params []string
		for i := 1; i <= int(f.n); i++ {
			params = append(params, fmt.Sprintf("$%d", i))
		}
		ret := f.ret
		if f.set {
			ret = "SETOF " + ret
		}
		what := fmt.Sprintf("%s.%s(%s)", schema, f.name, f.args)
		try(what, fmt.Sprintf(`CREATE FUNCTION %s.%s(%s) RETURNS %s LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
			AS $f$ SELECT public.fg_planted(%s); SELECT pg_catalog.%s(%s) $f$`,
			schema, pgx.Identifier{f.name}.Sanitize(), f.args, ret, quoteLit(what), pgx.Identifier{f.name}.Sanitize(), strings.Join(params, ", ")))
	}
	// Aggregates and functions whose signatures all take pseudo-types: the
	// copies a call with built-in argument types would prefer.
	for _, extra := range []struct{ word, what, sql string }{
		{"count", "count(*)", `CREATE FUNCTION %[1]s.fg_count_step(s pg_catalog.int8) RETURNS pg_catalog.int8 LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.count(*)'); SELECT s + 1 $f$;
			CREATE AGGREGATE %[1]s.count(*) (SFUNC = %[1]s.fg_count_step, STYPE = pg_catalog.int8, INITCOND = '0')`},
		{"bool_or", "bool_or(boolean)", `CREATE FUNCTION %[1]s.fg_or_step(s pg_catalog.bool, v pg_catalog.bool) RETURNS pg_catalog.bool LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.bool_or'); SELECT s OR v $f$;
			CREATE AGGREGATE %[1]s.bool_or(pg_catalog.bool) (SFUNC = %[1]s.fg_or_step, STYPE = pg_catalog.bool)`},
		{"every", "every(boolean)", `CREATE FUNCTION %[1]s.fg_and_step(s pg_catalog.bool, v pg_catalog.bool) RETURNS pg_catalog.bool LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.every'); SELECT s AND v $f$;
			CREATE AGGREGATE %[1]s.every(pg_catalog.bool) (SFUNC = %[1]s.fg_and_step, STYPE = pg_catalog.bool)`},
		{"string_agg", "string_agg(text, text)", `CREATE FUNCTION %[1]s.fg_cat_step(s pg_catalog.text, v pg_catalog.text, d pg_catalog.text) RETURNS pg_catalog.text LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.string_agg'); SELECT CASE WHEN s IS NULL THEN v ELSE s || d || v END $f$;
			CREATE AGGREGATE %[1]s.string_agg(pg_catalog.text, pg_catalog.text) (SFUNC = %[1]s.fg_cat_step, STYPE = pg_catalog.text)`},
		{"array_agg", "array_agg(text)", `CREATE FUNCTION %[1]s.fg_arr_step(s pg_catalog.text[], v pg_catalog.text) RETURNS pg_catalog.text[] LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.array_agg'); SELECT s || v $f$;
			CREATE AGGREGATE %[1]s.array_agg(pg_catalog.text) (SFUNC = %[1]s.fg_arr_step, STYPE = pg_catalog.text[])`},
		{"aclexplode", "aclexplode(aclitem[])", `CREATE FUNCTION %[1]s.aclexplode(a pg_catalog.aclitem[]) RETURNS TABLE (grantor pg_catalog.oid, grantee pg_catalog.oid, privilege_type pg_catalog.text, is_grantable pg_catalog.bool)
			LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.aclexplode'); SELECT * FROM pg_catalog.aclexplode(a) $f$`},
		{"pg_identify_object", "pg_identify_object(oid, oid, integer)", `CREATE FUNCTION %[1]s.pg_identify_object(c pg_catalog.oid, o pg_catalog.oid, s pg_catalog.int4) RETURNS TABLE (type pg_catalog.text, schema pg_catalog.text, name pg_catalog.text, identity pg_catalog.text)
			LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.pg_identify_object'); SELECT * FROM pg_catalog.pg_identify_object(c, o, s) $f$`},
		{"format", "format(text, text)", `CREATE FUNCTION %[1]s.format(f pg_catalog.text, a pg_catalog.text) RETURNS pg_catalog.text LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.format(text, text)'); SELECT pg_catalog.format(f, a) $f$`},
		{"format", "format(text, name)", `CREATE FUNCTION %[1]s.format(f pg_catalog.text, a pg_catalog.name) RETURNS pg_catalog.text LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.format(text, name)'); SELECT pg_catalog.format(f, a) $f$`},
		{"format", "format(text, name, regclass)", `CREATE FUNCTION %[1]s.format(f pg_catalog.text, a pg_catalog.name, b pg_catalog.regclass) RETURNS pg_catalog.text LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.format(text, name, regclass)'); SELECT pg_catalog.format(f, a, b) $f$`},
		{"format", "format(text, regclass)", `CREATE FUNCTION %[1]s.format(f pg_catalog.text, a pg_catalog.regclass) RETURNS pg_catalog.text LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted('%[1]s.format(text, regclass)'); SELECT pg_catalog.format(f, a) $f$`},
	} {
		if slices.Contains(words, extra.word) && schema == "public" {
			try(schema+"."+extra.what, fmt.Sprintf(extra.sql, schema))
		}
	}
	// Operators: every catalog operator whose symbol the statements use,
	// for built-in operand types.
	rows, err = conn.Query(ctx, `SELECT o.oprname::pg_catalog.text,
		CASE WHEN o.oprleft = 0 THEN 'NONE' ELSE pg_catalog.format_type(o.oprleft, NULL) END,
		pg_catalog.format_type(o.oprright, NULL), pg_catalog.format_type(o.oprresult, NULL), o.oprleft = 0
		FROM pg_catalog.pg_operator o
		WHERE o.oprnamespace = 'pg_catalog'::pg_catalog.regnamespace AND o.oprname::pg_catalog.text = ANY ($1::pg_catalog.text[])
		  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type y WHERE y.typtype = 'p' AND y.oid IN (o.oprleft, o.oprright, o.oprresult))
		ORDER BY 1, 2, 3`, operatorSymbols(words))
	if err != nil {
		t.Fatal(err)
	}
	type op struct {
		name, left, right, result string
		prefix                    bool
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (op, error) {
		var o op
		err := r.Scan(&o.name, &o.left, &o.right, &o.result, &o.prefix)
		return o, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range ops {
		what := fmt.Sprintf("%s.%s(%s, %s)", schema, o.name, o.left, o.right)
		fn := fmt.Sprintf("%s.fg_op_%d", schema, i)
		if o.prefix {
			try(what, fmt.Sprintf(`CREATE FUNCTION %[1]s(%[2]s) RETURNS %[3]s LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted(%[4]s); SELECT OPERATOR(pg_catalog.%[5]s) $1 $f$;
				CREATE OPERATOR %[6]s.%[5]s (RIGHTARG = %[2]s, FUNCTION = %[1]s)`, fn, o.right, o.result, quoteLit(what), o.name, schema))
			continue
		}
		try(what, fmt.Sprintf(`CREATE FUNCTION %[1]s(%[2]s, %[3]s) RETURNS %[4]s LANGUAGE sql SET search_path = pg_catalog AS $f$ SELECT public.fg_planted(%[5]s); SELECT $1 OPERATOR(pg_catalog.%[6]s) $2 $f$;
			CREATE OPERATOR %[7]s.%[6]s (LEFTARG = %[2]s, RIGHTARG = %[3]s, FUNCTION = %[1]s)`, fn, o.left, o.right, o.result, quoteLit(what), o.name, schema))
	}
	// Relations: a view in front of each catalog table or view named.
	rows, err = conn.Query(ctx, `SELECT c.relname::pg_catalog.text, pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum)
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		JOIN pg_catalog.pg_type y ON y.oid = a.atttypid AND y.typtype <> 'p'
		WHERE c.relnamespace = 'pg_catalog'::pg_catalog.regnamespace AND c.relkind IN ('r', 'v') AND c.relname::pg_catalog.text = ANY ($1::pg_catalog.text[])
		GROUP BY 1 ORDER BY 1`, words)
	if err != nil {
		t.Fatal(err)
	}
	type rel struct{ name, cols string }
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
		var x rel
		err := r.Scan(&x.name, &x.cols)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rels {
		what := schema + "." + r.name
		try(what, fmt.Sprintf(`CREATE VIEW %s.%s AS SELECT %s FROM pg_catalog.%s WHERE public.fg_planted(%s)`, schema, r.name, r.cols, r.name, quoteLit(what)))
	}
	// Types, last (the statements above name built-in types unqualified):
	// a domain over each base type named, whose check runs planted code.
	rows, err = conn.Query(ctx, `SELECT t.typname::pg_catalog.text FROM pg_catalog.pg_type t
		WHERE t.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AND t.typtype = 'b' AND t.typname::pg_catalog.text = ANY ($1::pg_catalog.text[])
		ORDER BY 1`, words)
	if err != nil {
		t.Fatal(err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, ty := range types {
		what := schema + "." + ty
		try(what, fmt.Sprintf(`CREATE DOMAIN %s.%s AS pg_catalog.%s CHECK (public.fg_planted(%s) OR VALUE IS NULL)`,
			schema, pgx.Identifier{ty}.Sanitize(), pgx.Identifier{ty}.Sanitize(), quoteLit(what)))
	}
	return made
}

// adminWorkload runs, as the superuser, every admin operation of the
// package on db: a (unpinned: the package pins its own transactions) and b
// (pinned with AdminSession, as the command line does, for Inspect, which
// also runs on a). It stops at the first operation that fails and returns
// its error.
func adminWorkload(t *testing.T, db *pgfencetest.DB, a, b *pgx.Conn) (err error) {
	t.Helper()
	ctx := context.Background()
	h := db.Admin(t) // the test's own hand, pinned so that it plants nothing by accident
	for _, q := range []string{"SET search_path = pg_catalog",
		"CREATE TABLE public.fg_orders (id pg_catalog.int4 PRIMARY KEY, note pg_catalog.text)",
		"INSERT INTO public.fg_orders VALUES (1, 'a')"} {
		if _, err := h.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	type failed struct{ err error }
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failed)
			if !ok {
				panic(r)
			}
			err = f.err
		}
	}()
	step := func(what string, err error) {
		if err != nil {
			panic(failed{fmt.Errorf("%s: %w", what, err)})
		}
	}
	_, err = pgfence.Install(ctx, a, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}})
	step("install", err)
	step("protect", pgfence.Protect(ctx, a, "fg_orders", "'order:' || id"))
	step("set mark", pgfence.SetMark(ctx, a, "order:1", 7, "planted test"))
	_, err = pgfence.Marks(ctx, a)
	step("marks", err)
	_, err = pgfence.Marks(ctx, a, "order:1", "order:2")
	step("marks of resources", err)
	_, err = pgfence.Audit(ctx, a, "")
	step("audit", err)
	_, err = pgfence.Audit(ctx, a, "order:1")
	step("audit of a resource", err)
	_, err = pgfence.Prune(ctx, a, 3, pgfence.PruneOptions{})
	step("prune", err)
	_, err = pgfence.Stats(ctx, a)
	step("marks stats", err)
	_, err = pgfence.Floor(ctx, a)
	step("floor", err)
	// Alter the schema, then repair it (the upgrade command, the proxy's repair).
	for _, q := range []string{
		`CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint) RETURNS bigint
			LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS 'SELECT token'`,
		`CREATE FUNCTION fencegate.extra(x int) RETURNS int LANGUAGE sql AS 'SELECT x'`,
		`CREATE FUNCTION public.fg_noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'`,
		`CREATE TRIGGER fg_extra AFTER INSERT ON fencegate.marks FOR EACH ROW EXECUTE FUNCTION public.fg_noop()`,
		`GRANT UPDATE ON fencegate.marks TO PUBLIC`,
		`ALTER TABLE public.fg_orders DISABLE TRIGGER fencegate_upd`,
	} {
		if _, err := h.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rep, err := pgfence.Install(ctx, a, pgfence.InstallOptions{RequireInstalled: true})
	step("upgrade", err)
	if len(rep.Actions) < 4 {
		t.Errorf("the repair did %q; want the fence restored, fencegate.extra and the trigger dropped, the grant revoked, the checks restored", rep.Actions)
	}
	_, err = pgfence.RequireSigned(ctx, a, "cluster-planted", keyring(t, keyNew, keyOld))
	step("require signed", err)
	_, err = pgfence.SigningStatus(ctx, a)
	step("signing status", err)
	_, err = pgfence.AllowUnsigned(ctx, a)
	step("allow unsigned", err)
	// A library caller's session, never pinned: Inspect pins its own
	// transaction.
	_, err = pgfence.Inspect(ctx, a)
	step("status on an unpinned session", err)
	step("pin the status session", pgfence.AdminSession(ctx, b))
	st, err := pgfence.Inspect(ctx, b)
	step("status", err)
	if len(st.Tables) != 1 || !strings.HasSuffix(st.Tables[0].Table, "fg_orders") {
		t.Errorf("status after the repair: tables %v; want public.fg_orders", st.Tables)
	}
	step("unprotect", pgfence.Unprotect(ctx, a, "fg_orders"))
	return nil
}

// sqlLog records every statement a connection sends.
type sqlLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sql = append(l.sql, d.SQL)
	return ctx
}

func (l *sqlLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sql = nil
}

func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

var (
	wordRE     = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	operatorRE = regexp.MustCompile(`[-+*/<>=~!@#%^&|?]+`)
	literalRE  = regexp.MustCompile(`'(?:[^']|'')*'`)
)

// words returns the distinct words of the recorded statements, lower
// case, and the operator symbols they use (LIKE as ~~, IN and ANY as =).
func (l *sqlLog) words() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{"=": true, "~~": true, "!~~": true, "<>": true}
	for _, s := range l.sql {
		for _, w := range wordRE.FindAllString(s, -1) {
			seen[strings.ToLower(w)] = true
		}
		for _, o := range operatorRE.FindAllString(literalRE.ReplaceAllString(s, "''"), -1) {
			seen[o] = true
		}
	}
	var out []string
	for w := range seen {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// operatorSymbols keeps the operator symbols among words.
func operatorSymbols(words []string) []string {
	return slices.DeleteFunc(slices.Clone(words), func(w string) bool { return wordRE.MatchString(w) })
}

// noticeLog collects the notices a connection receives.
type noticeLog struct {
	mu  sync.Mutex
	msg []string
}

func (n *noticeLog) add(_ *pgconn.PgConn, m *pgconn.Notice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.msg = append(n.msg, m.Message)
}

// planted returns the notices of planted objects that ran.
func (n *noticeLog) planted() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, m := range n.msg {
		if strings.HasPrefix(m, "fg-planted ran:") && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// adminConn connects to dsn recording the statements sent in log and the
// notices received in notices (either may be nil).
func adminConn(t *testing.T, dsn string, log *sqlLog, notices *noticeLog) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if log != nil {
		cfg.Tracer = log
	}
	if notices != nil {
		cfg.OnNotice = notices.add
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func pgMessage(err error) string {
	if pe, ok := err.(*pgconn.PgError); ok {
		return pe.Message
	}
	return err.Error()
}
