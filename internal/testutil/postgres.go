package testutil

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgdb"
)

// PostgresAdminDSN returns the DSN of the PostgreSQL server used by tests.
func PostgresAdminDSN() string {
	if v := os.Getenv("FENCEGATE_TEST_PG"); v != "" {
		return v
	}
	return pgdb.DefaultAdminDSN
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

// PostgresBinDir returns the directory of the server binaries (initdb,
// postgres) for tests that start a server of their own: FENCEGATE_TEST_PGBIN
// when set (the version matrix sets it to the binaries of the server
// FENCEGATE_TEST_PG points at, so both are of one major), else the newest
// /usr/lib/postgresql/*/bin that holds both. The test fails when there is none.
func PostgresBinDir(t testing.TB) string {
	t.Helper()
	NeedServices(t)
	if v := os.Getenv("FENCEGATE_TEST_PGBIN"); v != "" {
		return v
	}
	if dirs := pgdb.ServerBinDirs(pgdb.DistroBinGlob); len(dirs) > 0 {
		return dirs[0]
	}
	t.Fatal("no PostgreSQL server binaries (initdb, postgres) in /usr/lib/postgresql/*/bin; install the postgresql package or set FENCEGATE_TEST_PGBIN")
	return ""
}

var (
	majorOnce sync.Once
	majorNum  int
	majorErr  error
)

// PostgresMajor returns the major version of the test PostgreSQL server
// (PostgresAdminDSN), asked once per test process: for tests of a statement
// or privilege that only some majors have (MERGE is 15's, GRANT SET ON
// PARAMETER too), which the version matrix runs on each.
func PostgresMajor(t testing.TB) int {
	t.Helper()
	NeedServices(t)
	majorOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		majorNum, majorErr = pgdb.ServerVersionNum(ctx, PostgresAdminDSN())
		majorNum /= 10000
	})
	if majorErr != nil {
		t.Fatalf("PostgreSQL at %s: %v (start it, or set FENCEGATE_TEST_PG)", PostgresAdminDSN(), majorErr)
	}
	return majorNum
}

// WithoutMerge drops the MERGE statements from stmts when the test server
// predates MERGE (PostgreSQL 15).
func WithoutMerge(t testing.TB, stmts []string) []string {
	t.Helper()
	if PostgresMajor(t) >= 15 {
		return stmts
	}
	var out []string
	for _, s := range stmts {
		if !strings.HasPrefix(strings.TrimSpace(s), "MERGE") {
			out = append(out, s)
		}
	}
	return out
}

// NeedMajor skips the test, saying why, unless the test server runs
// PostgreSQL major or newer: for a route that appeared in that major (the
// version matrix runs the test on every supported one).
func NeedMajor(t testing.TB, major int, what string) {
	t.Helper()
	if got := PostgresMajor(t); got < major {
		t.Skipf("%s needs PostgreSQL %d or newer; the server is %d", what, major, got)
	}
}
