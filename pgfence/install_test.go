package pgfence_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// health runs HealthQuery the way the proxy does (simple protocol) and
// returns its rows.
func health(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), pgfence.HealthQuery, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("HealthQuery: %v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("HealthQuery: %v", err)
	}
	return out
}

func TestInstallFresh(t *testing.T) {
	db := pgfencetest.New(t)
	rep := db.Report
	if rep.FromVersion != 0 || rep.ToVersion != pgfence.SchemaVersion || rep.OwnerRole != db.Owner {
		t.Fatalf("report = %+v", rep)
	}
	if !slices.Contains(rep.AppRoles, db.App) {
		t.Fatalf("AppRoles = %v, want %s in it", rep.AppRoles, db.App)
	}
	admin := db.Admin(t)
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery after install = %q, want no rows", got)
	}
	if got := health(t, db.AppConn(t)); len(got) != 0 {
		t.Fatalf("HealthQuery as the application role = %q, want no rows", got)
	}
	// Idempotent: a second install changes nothing.
	rep2, err := pgfence.Install(context.Background(), admin, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep2.Actions) != 0 || rep2.FromVersion != pgfence.SchemaVersion {
		t.Fatalf("second install: FromVersion=%d actions=%q, want %d and none", rep2.FromVersion, rep2.Actions, pgfence.SchemaVersion)
	}
	st, err := pgfence.Inspect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Installed || st.Version != pgfence.SchemaVersion || st.OwnerRole != db.Owner || len(st.Problems) != 0 {
		t.Fatalf("Inspect = %+v", st)
	}
}

func TestHealthQueryWithoutSchema(t *testing.T) {
	dsn := testutil.PostgresDB(t)
	conn := pgfencetest.Connect(t, dsn)
	got := health(t, conn)
	if len(got) != 1 || !strings.Contains(got[0], "not installed") || !strings.Contains(got[0], "fencegate schema install") {
		t.Fatalf("HealthQuery on an empty database = %q", got)
	}
	st, err := pgfence.Inspect(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	if st.Installed || st.Version != 0 {
		t.Fatalf("Inspect = %+v", st)
	}
	_, err = pgfence.Install(context.Background(), conn, pgfence.InstallOptions{OwnerRole: "fg_owner_unused", RequireInstalled: true})
	if !errors.Is(err, pgfence.ErrNotInstalled) {
		t.Fatalf("upgrade of an empty database: %v, want ErrNotInstalled", err)
	}
}

// TestInstallKeepsOwner: without an owner role named, Install keeps the
// schema's current one.
func TestInstallKeepsOwner(t *testing.T) {
	db := pgfencetest.New(t)
	rep, err := pgfence.Install(context.Background(), db.Admin(t), pgfence.InstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OwnerRole != db.Owner || len(rep.Actions) != 0 {
		t.Fatalf("Install without an owner: owner %s, actions %q; want %s and none", rep.OwnerRole, rep.Actions, db.Owner)
	}
}
