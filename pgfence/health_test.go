package pgfence_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

var update = flag.Bool("update", false, "rewrite health_functions.go from the embedded SQL")

// TestHealthFunctions keeps HealthQuery's list of functions in step with the
// embedded SQL: it installs the schema (with the DDL guard) and compares
// what PostgreSQL stored with the list. On a mismatch it prints the list to
// paste into health_functions.go; -update writes it.
func TestHealthFunctions(t *testing.T) {
	db := pgfencetest.New(t, pgfencetest.Options{GuardDDL: true})
	conn := db.Admin(t)
	rows, err := conn.Query(context.Background(), `SELECT p.proname, pg_get_function_identity_arguments(p.oid), p.prosecdef,
		coalesce(p.proconfig::text, '{}'), md5(p.prosrc)
		FROM pg_proc p WHERE p.pronamespace = 'fencegate'::regnamespace ORDER BY p.oid`)
	if err != nil {
		t.Fatal(err)
	}
	type fn struct {
		name, args string
		definer    bool
		config     string
		md5        string
	}
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		err := r.Scan(&f.name, &f.args, &f.definer, &f.config, &f.md5)
		return f, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i, f := range fns {
		app := f.name == "fence" || f.name == "fence_many" || f.name == "effect"
		guard := strings.HasPrefix(f.name, "guard_")
		sep := ","
		if i == len(fns)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "\t('%s', '%s', %t, %t, %t, '%s', '%s')%s\n", f.name, f.args, f.definer, app, guard, strings.ReplaceAll(f.config, "'", "''"), f.md5, sep)
	}
	if *update {
		src, err := os.ReadFile("health_functions.go")
		if err != nil {
			t.Fatal(err)
		}
		head, tail, ok := strings.Cut(string(src), "const healthFunctions = `")
		if !ok {
			t.Fatal("health_functions.go: no const healthFunctions")
		}
		_, rest, ok := strings.Cut(tail, "`")
		if !ok {
			t.Fatal("health_functions.go: const healthFunctions is not closed")
		}
		if err := os.WriteFile("health_functions.go", []byte(head+"const healthFunctions = `"+b.String()+"`"+rest), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := pgfence.HealthFunctionsForTest(); got != b.String() {
		t.Fatalf("health_functions.go is out of step with the embedded SQL; replace healthFunctions with:\n%s", b.String())
	}
}

// TestHealthFindsAlterations alters the schema or a protected table the
// ways an owner (or an attacker with its rights) could, and checks that
// HealthQuery names each problem with its repairing command, that the
// fence refuses to run where it can tell cheaply, and that the named
// command (Install, or protect again) repairs it.
func TestHealthFindsAlterations(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		alter      string // as the superuser; {owner} is the owner role, {app} the application role
		want       string // in a HealthQuery row
		fenceFails bool   // the fence refuses with FG005
	}{
		{name: "fence replaced", alter: `SET ROLE {owner}; CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '5s' AS $fg$BEGIN RETURN token; END$fg$`,
			want: "function fencegate.fence(text,bigint) is altered (its body)"},
		{name: "fence overloaded", alter: `SET ROLE {owner}; CREATE FUNCTION fencegate.fence(resource text, token integer) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'`,
			want: "fencegate.fence(text,integer) is not part of schema fencegate", fenceFails: true},
		{name: "fence made invoker", alter: `ALTER FUNCTION fencegate.fence(text, bigint) SECURITY INVOKER`, want: "its SECURITY DEFINER"},
		{name: "search_path unpinned", alter: `ALTER FUNCTION fencegate.check_update() RESET search_path`, want: "fencegate.check_update() is altered (its settings)"},
		{name: "function given away", alter: `ALTER FUNCTION fencegate.check_row() OWNER TO {app}`, want: "fencegate.check_row() is altered (its owner)"},
		{name: "function executable by PUBLIC", alter: `GRANT EXECUTE ON FUNCTION fencegate.set_mark(text, bigint, text) TO PUBLIC`, want: "set_mark(text,bigint,text) is executable by PUBLIC"},
		{name: "function executable by the application", alter: `GRANT EXECUTE ON FUNCTION fencegate.shape(regclass) TO {app}`, want: "shape(regclass) is executable by"},
		{name: "marks writable", alter: `GRANT UPDATE ON fencegate.marks TO {app}`, want: "UPDATE on fencegate.marks is granted to"},
		{name: "marks given away", alter: `ALTER TABLE fencegate.marks OWNER TO {app}`, want: "fencegate.marks belongs to role"},
		{name: "schema writable", alter: `GRANT CREATE ON SCHEMA fencegate TO {app}`, want: "CREATE on schema fencegate is granted to"},
		{name: "trigger on the marks", alter: `CREATE TRIGGER x BEFORE UPDATE ON fencegate.marks FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()`, want: "table fencegate.marks has trigger x"},
		{name: "row security on the marks", alter: `ALTER TABLE fencegate.marks ENABLE ROW LEVEL SECURITY`, want: "row-level security"},
		{name: "check function dropped", alter: `DROP FUNCTION fencegate.check_row() CASCADE`, want: "function fencegate.check_row() is missing"},
		{name: "version changed", alter: `SET ROLE {owner}; CREATE OR REPLACE FUNCTION fencegate.schema_version() RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fg$SELECT 1$fg$`,
			want: "fencegate.schema_version() is altered"},
		{name: "trigger dropped", alter: `DROP TRIGGER fencegate_upd ON shop.orders`, want: "protected table shop.orders has no working fencegate check (fencegate_upd"},
		{name: "resource change check made blind", alter: `DROP TRIGGER fencegate_move ON shop.orders; CREATE TRIGGER fencegate_move AFTER UPDATE ON shop.orders FOR EACH ROW WHEN (OLD.fencegate_resource IS DISTINCT FROM NEW.fencegate_resource AND false) EXECUTE FUNCTION fencegate.check_row()`,
			want: "protected table shop.orders has no working fencegate check (fencegate_move"},
		{name: "resource change check on a planted operator", alter: `CREATE FUNCTION public.never(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'; CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.never);
			SET search_path = public, pg_catalog; DROP TRIGGER fencegate_move ON shop.orders; CREATE TRIGGER fencegate_move AFTER UPDATE ON shop.orders FOR EACH ROW WHEN (OLD.fencegate_resource IS DISTINCT FROM NEW.fencegate_resource) EXECUTE FUNCTION fencegate.check_row(); RESET search_path`,
			want: "protected table shop.orders has no working fencegate check (fencegate_move"},
		{name: "trigger disabled", alter: `ALTER TABLE shop.orders DISABLE TRIGGER fencegate_ins`, want: "shop.orders has no working fencegate check (fencegate_ins"},
		{name: "trigger set to origin only", alter: `ALTER TABLE shop.notes ENABLE TRIGGER fencegate_del`, want: "shop.notes has no working fencegate check (fencegate_del"},
		{name: "replica check dropped", alter: `DROP TRIGGER fencegate_replica ON shop.ledger_2024`, want: "child table shop.ledger_2024 has no working fencegate check (fencegate_replica"},
		{name: "partition template disabled", alter: `ALTER TABLE ONLY shop.events DISABLE TRIGGER fencegate_row`, want: "shop.events has no working fencegate check (fencegate_row"},
		{name: "partition check dropped", alter: `ALTER TABLE ONLY shop.events_p1a DISABLE TRIGGER fencegate_row; DROP TRIGGER fencegate_ins ON shop.events_p1a`, want: "partition shop.events_p1a has no working fencegate check (fencegate_ins"},
		{name: "partition template dropped", alter: `DROP TRIGGER fencegate_row ON shop.events; CREATE TABLE shop.events_p5 PARTITION OF shop.events FOR VALUES FROM (500) TO (600)`,
			want: "partition shop.events_p5 has no working fencegate check (fencegate_ins"},
		{name: "inheritance child added", alter: `CREATE TABLE shop.ledger_2025 () INHERITS (shop.ledger)`, want: "child table shop.ledger_2025 has no working fencegate check (fencegate_ins"},
		{name: "extra table in the schema", alter: `CREATE TABLE fencegate.extra (i int)`, want: "table fencegate.extra is not part of schema fencegate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			alter := strings.NewReplacer("{owner}", f.db.Owner, "{app}", f.db.App).Replace(c.alter)
			if _, err := f.admin.Exec(ctx, alter+"; RESET ROLE", pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatalf("alter: %v", err)
			}
			got := health(t, f.admin)
			if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Fatalf("HealthQuery = %q, want a row with %q", got, c.want)
			}
			for _, p := range got {
				if !strings.Contains(p, `run "`) && !strings.Contains(p, "run: ") && !strings.Contains(p, "drop it") {
					t.Fatalf("problem %q names no command", p)
				}
			}
			if c.fenceFails {
				// The call as clients send it (FenceSQL casts its arguments,
				// so an overload cannot capture it).
				err := script(f.app, "BEGIN", "SELECT fencegate.fence('order:1'::text, 1::bigint)", "COMMIT")
				expectErr(t, "fence on an altered schema", err, fencegate.CodeSchemaInvalid)
				if !strings.Contains(err.Error(), "fencegate schema upgrade") {
					t.Fatalf("fence error %q names no command", err)
				}
			}
			if c.name == "extra table in the schema" {
				return // an administrator drops it; Install never drops relations
			}
			if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner}); err != nil {
				t.Fatalf("repair: %v", err)
			}
			if got := health(t, f.admin); len(got) != 0 {
				t.Fatalf("HealthQuery after the repair = %q", got)
			}
			err := attempt(ctx, f.app, []string{"order:2"}, []string{"UPDATE shop.orders SET state = 'x' WHERE id = 1"}, false)
			wantRefused(t, err, fencegate.CodeUnfenced)
			err = attempt(ctx, f.app, nil, []string{"INSERT INTO shop.events VALUES (7, 7, 'x')"}, false)
			wantRefused(t, err, fencegate.CodeUnfenced)
			if err := attempt(ctx, f.app, []string{"order:1"}, []string{"UPDATE shop.orders SET state = 'x' WHERE id = 1"}, false); err != nil {
				t.Fatalf("fenced write after the repair: %v", err)
			}
		})
	}
}

// TestHealthOwnerCanLogin: an owner role that can log in is a problem, and
// Install refuses to use it.
func TestHealthOwnerCanLogin(t *testing.T) {
	db := pgfencetest.New(t)
	db.Exec(t, "ALTER ROLE "+db.Owner+" LOGIN")
	admin := db.Admin(t)
	got := health(t, admin)
	if len(got) != 1 || !strings.Contains(got[0], "ALTER ROLE "+db.Owner+" NOLOGIN") {
		t.Fatalf("HealthQuery = %q", got)
	}
	_, err := pgfence.Install(context.Background(), admin, pgfence.InstallOptions{OwnerRole: db.Owner})
	if !errors.Is(err, pgfence.ErrOwnerRole) {
		t.Fatalf("Install with a login owner: %v, want ErrOwnerRole", err)
	}
}

// TestHealthNewPartition: a partition added after protect is checked row by
// row, which is sound: a warning, not a problem; Install gives it its
// statement-level checks.
func TestHealthNewPartition(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	mustExec(t, f.admin, "CREATE TABLE shop.events_p5 PARTITION OF shop.events FOR VALUES FROM (500) TO (600); GRANT ALL ON shop.events_p5 TO "+f.db.App)
	if got := health(t, f.admin); len(got) != 0 {
		t.Fatalf("HealthQuery with a new partition = %q", got)
	}
	st, err := pgfence.Inspect(ctx, f.admin)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(st.Warnings, func(w string) bool {
		return strings.Contains(w, "partition shop.events_p5 was added after shop.events was protected")
	}) {
		t.Fatalf("Inspect warnings = %q", st.Warnings)
	}
	err = attempt(ctx, f.app, []string{"acct:1"}, []string{"INSERT INTO shop.events_p5 VALUES (5, 550, 'x')"}, false)
	wantRefused(t, err, fencegate.CodeUnfenced, "'acct:550'")
	rep, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Actions, func(a string) bool {
		return strings.Contains(a, "restored the checks of protected table shop.events_p5")
	}) {
		t.Fatalf("Install actions = %q", rep.Actions)
	}
	if s := shapeOf(t, f.admin, "shop.events_p5"); !strings.Contains(s, "fencegate_ins:A") || !strings.Contains(s, "fencegate_row:A") {
		t.Fatalf("shape after Install: %s", s)
	}
	st, err = pgfence.Inspect(ctx, f.admin)
	if err != nil || slices.ContainsFunc(st.Warnings, func(w string) bool { return strings.Contains(w, "was added after") }) {
		t.Fatalf("Inspect after Install: %q %v", st.Warnings, err)
	}
}
