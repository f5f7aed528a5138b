package devstack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/pgdb"

	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5"
)

// A second dev stack with another data directory never changes the
// password of the application role the first one created (the first
// stack's DSN would stop working wherever pg_hba checks passwords): it
// refuses in one line that names the AppRole setting. --reset keeps the password
// the data directory holds, so the stack that created the role comes back
// up without touching it either.
func TestSecondDataDirLeavesPasswordAlone(t *testing.T) {
	ctx := context.Background()
	admin := testutil.PostgresAdminDSN()
	dbName := DatabaseOf(testutil.PostgresDB(t))
	owner, app := testutil.RandomName("fg_pwowner_"), testutil.RandomName("fg_pwapp_")
	t.Cleanup(func() {
		if err := pgdb.DropRoles(context.Background(), admin, []string{dbName}, app, owner); err != nil {
			t.Error(err)
		}
	})
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	secret := func() string {
		t.Helper()
		var s string
		if err := c.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", app).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	setup := func(dir string) (*Stack, error) {
		abs, err := PrepareDataDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		s := &Stack{DataDir: abs, Postgres: &servers.Postgres{DSN: admin}}
		return s, s.setupDatabase(ctx, &stackConfig{Database: dbName, AppRole: app, OwnerRole: owner, Settings: "PersistentConfig"})
	}

	first := filepath.Join(t.TempDir(), "first")
	a, err := setup(first)
	if err != nil {
		t.Fatal(err)
	}
	if a.Passfile == "" || a.DB.AppPassword == "" {
		t.Fatalf("first stack: passfile %q; want the created role's password kept", a.Passfile)
	}
	before := secret()

	_, err = setup(filepath.Join(t.TempDir(), "second"))
	if after := secret(); after != before {
		t.Fatalf("a second data directory changed the password of role %s (the first stack's DSN breaks)", app)
	}
	if err == nil || !strings.Contains(err.Error(), "PersistentConfig.AppRole") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("second data directory: %v; want one line naming PersistentConfig.AppRole", err)
	}

	kept, err := ResetDataDir(first)
	if err != nil || !kept {
		t.Fatalf("ResetDataDir = %v, %v; want the pgpass kept", kept, err)
	}
	if entries, _ := os.ReadDir(first); len(entries) != 2 { // the marker and pgpass
		t.Fatalf("after reset %s holds %d entries; want the marker and pgpass", first, len(entries))
	}
	b, err := setup(first)
	if err != nil {
		t.Fatalf("the first stack after --reset: %v", err)
	}
	if secret() != before || b.DB.AppPassword != a.DB.AppPassword {
		t.Fatal("the first stack after --reset changed or lost its own role's password")
	}
}
