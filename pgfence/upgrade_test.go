package pgfence_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// v1Marks are taken through version 1's fence before the upgrade; they
// include resources that differ only in case, and non-ASCII ones, which a
// change of collation must keep apart.
var v1Marks = map[string]int64{"a": 5, "b": 7, "order:1": 3, "ORDER:1": 9, "é": 2, "e\u0301": 4, "a b": 1}

// installV1 installs version 1 the way the proxy did: as the application
// role, which then owns everything, and takes v1Marks through its fence.
func installV1(t *testing.T, db *pgfencetest.DB, app *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	v1, err := os.ReadFile("testdata/schema_v1.sql")
	if err != nil {
		t.Fatal(err)
	}
	db.Exec(t, "GRANT CREATE ON DATABASE "+dbName(t, db.DSN)+" TO "+db.App)
	if _, err := app.Exec(ctx, string(v1), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("install version 1: %v", err)
	}
	for r, tok := range v1Marks {
		tx, err := app.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET TRANSACTION READ WRITE"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT fencegate.fence($1, $2)", r, tok); err != nil {
			t.Fatalf("version 1 fence %q: %v", r, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func dbName(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}

func TestUpgradeFromV1(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	app := db.AppConn(t)
	installV1(t, db, app)
	other := pgfencetest.Role(t, db.DSN, "fg_other_", "LOGIN")
	// The version 1 owner could give anything away.
	if _, err := app.Exec(ctx, "GRANT ALL ON fencegate.marks TO "+other+"; GRANT CREATE ON SCHEMA fencegate TO "+other); err != nil {
		t.Fatal(err)
	}
	admin := db.Admin(t)
	if got := health(t, admin); len(got) == 0 {
		t.Fatal("HealthQuery reports nothing on a version 1 schema")
	}
	st, err := pgfence.Inspect(ctx, admin)
	if err != nil || st.Version != 1 {
		t.Fatalf("Inspect on version 1: %+v, %v", st, err)
	}

	rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	t.Logf("upgrade report: %+v", rep)
	if rep.FromVersion != 1 || rep.Marks != int64(len(v1Marks)) {
		t.Fatalf("report: from %d, %d marks; want from 1, %d marks", rep.FromVersion, rep.Marks, len(v1Marks))
	}
	if !slices.Contains(rep.AppRoles, db.App) {
		t.Fatalf("the former owner %s lost the application grants: %v", db.App, rep.AppRoles)
	}
	for _, want := range []string{"handed schema fencegate from " + db.App, "dropped fencegate.fence_alone()", "dropped fencegate.schema_v1()", "revoked from " + other} {
		if !slices.ContainsFunc(rep.Actions, func(a string) bool { return strings.Contains(a, want) }) {
			t.Fatalf("actions %q lack %q", rep.Actions, want)
		}
	}
	marks, err := pgfence.Marks(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != len(v1Marks) {
		t.Fatalf("marks after the upgrade: %+v", marks)
	}
	for _, m := range marks {
		if v1Marks[m.Resource] != m.Token {
			t.Fatalf("mark %q = %d after the upgrade, want %d", m.Resource, m.Token, v1Marks[m.Resource])
		}
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery after the upgrade = %q", got)
	}

	// The former owner is an application role now: it fences, and it can
	// no longer write, replace or drop anything.
	for r, tok := range v1Marks {
		err := script(app, "BEGIN", "SELECT fencegate.fence('"+strings.ReplaceAll(r, "'", "''")+"', "+itoa(tok-1)+")", "COMMIT")
		expectErr(t, "stale fence on "+r, err, fencegate.CodeStaleToken)
	}
	if err := script(app, "BEGIN", "SELECT fencegate.fence('ORDER:1', 9)", "COMMIT"); err != nil {
		t.Fatalf("equal token after the upgrade: %v", err)
	}
	for _, q := range []string{"UPDATE fencegate.marks SET token = 0", "DROP SCHEMA fencegate CASCADE",
		"CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint) RETURNS bigint LANGUAGE sql AS 'SELECT token'"} {
		_, err := app.Exec(ctx, q)
		expectErr(t, q, err, "")
	}
	otherConn := pgfencetest.Connect(t, pgfencetest.WithUser(t, db.DSN, other))
	_, err = otherConn.Exec(ctx, "DELETE FROM fencegate.marks")
	expectErr(t, "a grant made by the version 1 owner", err, "42501")

	// A proxy of version 1 still running tries to install version 1 again
	// as the application role: it cannot, and the schema stays.
	v1, _ := os.ReadFile("testdata/schema_v1.sql")
	_, err = app.Exec(ctx, string(v1), pgx.QueryExecModeSimpleProtocol)
	expectErr(t, "reinstalling version 1", err, "")
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery after a version 1 proxy tried to reinstall = %q", got)
	}
}

// TestUpgradeNewer refuses a schema of a later version and changes nothing.
func TestUpgradeNewer(t *testing.T) {
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	newer := itoa(int64(pgfence.SchemaVersion + 1))
	db.Exec(t, "CREATE OR REPLACE FUNCTION fencegate.schema_version() RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fg$SELECT "+newer+"$fg$")
	_, err := pgfence.Install(context.Background(), admin, pgfence.InstallOptions{OwnerRole: db.Owner})
	if err == nil || !strings.Contains(err.Error(), "version "+newer) {
		t.Fatalf("Install over version %s: %v", newer, err)
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
