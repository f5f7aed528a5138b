package pgfence_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// PrivilegeQuery and HealthQuery are documented as runnable by any role on
// any session: they must mean the same under a search_path the session's
// role chose. A CREATEROLE role (which PrivilegeQuery must name) plants, in
// a schema it puts before pg_catalog, an = that is always false, a <> that
// is always true, comparisons, a || that drops its operands, for every type
// the queries compare. Run there without pinning, PrivilegeQuery,
// HealthQuery and InventoryQuery return what they return under pg_catalog
// alone. Then it adds types and a collation named like the built-in ones
// the queries name.
func TestQueriesIgnoreSessionOperators(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	mustExec(t, f.admin, "ALTER TABLE shop.orders DISABLE TRIGGER fencegate_upd") // a problem for HealthQuery to report
	cr := pgfencetest.Role(t, f.db.DSN, "fg_cr_", "LOGIN CREATEROLE")
	mustExec(t, f.admin, "CREATE SCHEMA sneaky AUTHORIZATION "+cr)
	conn := pgfencetest.Connect(t, pgfencetest.WithUser(t, f.db.DSN, cr))
	run := func(q string) []string {
		t.Helper()
		rows, err := conn.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatalf("%.40s...: %v", q, err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%.40s...: %v", q, err)
		}
		slices.Sort(out)
		return out
	}
	mustExec(t, conn, "SET search_path = pg_catalog")
	wantPriv, wantHealth := run(pgfence.PrivilegeQuery), run(pgfence.HealthQuery)
	if !slices.ContainsFunc(wantPriv, func(r string) bool { return strings.Contains(r, "has CREATEROLE") }) || len(wantHealth) == 0 {
		t.Fatalf("under pg_catalog: PrivilegeQuery = %q, HealthQuery = %q; want CREATEROLE named and the disabled check", wantPriv, wantHealth)
	}

	var plant []string
	// Not int4 with int4: fencegate's own CHECK constraints use it, and
	// PostgreSQL prints them with OPERATOR(pg_catalog.=) where the path
	// shadows it (a false alarm of the inventory; see below).
	for i, types := range [][2]string{{"name", "name"}, {"text", "text"}, {"oid", "oid"}, {`"char"`, `"char"`}, {"bool", "bool"},
		{"int2", "int2"}, {"int2", "int4"}, {"int4", "int2"}, {"int8", "int8"}, {"regclass", "regclass"}, {"regrole", "regrole"},
		{"regnamespace", "regnamespace"}, {"regcollation", "regcollation"}, {"regproc", "regproc"}, {"aclitem", "aclitem"},
		{"text[]", "text[]"}, {`"char"[]`, `"char"[]`}, {"oid[]", "oid[]"}, {"name[]", "name[]"}} {
		for j, op := range []struct{ sym, result string }{
			{"=", "false"}, {"<>", "true"}, {"<", "true"}, {">", "true"}, {"<=", "true"}, {">=", "true"}} {
			fn := fmt.Sprintf("sneaky.f%d_%d", i, j)
			plant = append(plant,
				fmt.Sprintf("CREATE FUNCTION %s(pg_catalog.%s, pg_catalog.%s) RETURNS pg_catalog.bool LANGUAGE sql IMMUTABLE AS 'SELECT %s'", fn, types[0], types[1], op.result),
				fmt.Sprintf("CREATE OPERATOR sneaky.%s (LEFTARG = pg_catalog.%s, RIGHTARG = pg_catalog.%s, FUNCTION = %s)", op.sym, types[0], types[1], fn))
		}
	}
	plant = append(plant,
		"CREATE FUNCTION sneaky.cat(pg_catalog.text, pg_catalog.text) RETURNS pg_catalog.text LANGUAGE sql IMMUTABLE AS $$SELECT 'planted'$$",
		"CREATE OPERATOR sneaky.|| (LEFTARG = pg_catalog.text, RIGHTARG = pg_catalog.text, FUNCTION = sneaky.cat)",
	)
	for _, q := range plant {
		mustExec(t, conn, q)
	}
	// The operators really are picked under this path.
	mustExec(t, conn, "SET search_path = sneaky, pg_catalog")
	var eq bool
	if err := conn.QueryRow(ctx, "SELECT session_user = session_user").Scan(&eq); err != nil || eq {
		t.Fatalf("the planted = is not used (%v, %v)", eq, err)
	}
	if got := run(pgfence.PrivilegeQuery); !slices.Equal(got, wantPriv) {
		t.Errorf("PrivilegeQuery under a planted path = %q, want %q", got, wantPriv)
	}
	if got := run(pgfence.HealthQuery); !slices.Equal(got, wantHealth) {
		t.Errorf("HealthQuery under a planted path = %q, want %q", got, wantHealth)
	}
	// InventoryQuery's order (COLLATE "C") is part of its meaning.
	inv := func() string {
		t.Helper()
		rows, err := conn.Query(ctx, pgfence.InventoryQuery, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatalf("InventoryQuery: %v", err)
		}
		var b strings.Builder
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatalf("InventoryQuery: %v", err)
			}
			fmt.Fprintln(&b, v...)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("InventoryQuery: %v", err)
		}
		return b.String()
	}
	planted := inv()
	mustExec(t, conn, "SET search_path = pg_catalog")
	if want := inv(); planted != want {
		t.Errorf("InventoryQuery under a planted path =\n%s\nwant\n%s", planted, want)
	}

	// Types and a collation named like the built-in ones: PrivilegeQuery
	// is unchanged; HealthQuery still runs and reports the real problem.
	// (pg_get_constraintdef and its kind print a built-in name as
	// pg_catalog.text where the path shadows it, so the inventory then
	// reports false alarms, as HealthQuery's documentation says: never a
	// miss.)
	for _, q := range []string{
		"CREATE TYPE sneaky.text AS ENUM ('planted')",
		"CREATE TYPE sneaky.name AS ENUM ('planted')",
		"CREATE TYPE sneaky.oid AS ENUM ('planted')",
		"CREATE TYPE sneaky.int4 AS ENUM ('planted')",
		`CREATE COLLATION sneaky."C" FROM pg_catalog."und-x-icu"`,
		"SET search_path = sneaky, pg_catalog",
	} {
		mustExec(t, conn, q)
	}
	if got := run(pgfence.PrivilegeQuery); !slices.Equal(got, wantPriv) {
		t.Errorf("PrivilegeQuery under planted types = %q, want %q", got, wantPriv)
	}
	got := run(pgfence.HealthQuery)
	if !slices.ContainsFunc(got, func(p string) bool {
		return strings.Contains(p, "protected table shop.orders has no working fencegate check (fencegate_upd")
	}) {
		t.Errorf("HealthQuery under planted types = %q, want the disabled check reported", got)
	}
	inv()
}
