package pgfence_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

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
		app := f.name == "fence" || f.name == "fence_many"
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
		head, _, ok := strings.Cut(string(src), "const healthFunctions = `")
		if !ok {
			t.Fatal("health_functions.go: no const healthFunctions")
		}
		if err := os.WriteFile("health_functions.go", []byte(head+"const healthFunctions = `"+b.String()+"`\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := pgfence.HealthFunctionsForTest(); got != b.String() {
		t.Fatalf("health_functions.go is out of step with the embedded SQL; replace healthFunctions with:\n%s", b.String())
	}
}
