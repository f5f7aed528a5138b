package testutil

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgdb"
)

// DefaultPostgresDSN is the admin DSN used when FENCEGATE_TEST_PG is unset.
const DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// PostgresAdminDSN returns the DSN of the PostgreSQL server used by tests.
func PostgresAdminDSN() string {
	if v := os.Getenv("FENCEGATE_TEST_PG"); v != "" {
		return v
	}
	return DefaultPostgresDSN
}

// RandomName returns prefix followed by 12 random hex characters; it is a
// valid unquoted SQL identifier when prefix is.
var RandomName = pgdb.RandomName

// PostgresDB creates a fresh database on the test PostgreSQL server and
// returns its DSN (same host, user and options as the admin DSN). The database
// is dropped (WITH FORCE) when the test ends. The test fails if the server is
// not reachable.
func PostgresDB(t testing.TB) string {
	t.Helper()
	NeedServices(t)
	admin := PostgresAdminDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := RandomName("fg_test_")
	dsn, err := pgdb.Create(ctx, admin, name)
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v (start it, or set FENCEGATE_TEST_PG)", admin, err)
	}
	t.Cleanup(func() {
		if err := pgdb.Drop(context.Background(), admin, name); err != nil {
			t.Errorf("%v", err)
		}
	})
	return dsn
}
