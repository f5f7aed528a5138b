package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
func RandomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// PostgresDB creates a fresh database on the test PostgreSQL server and
// returns its DSN (same host, user and options as the admin DSN). The database
// is dropped (WITH FORCE) when the test ends. The test fails if the server is
// not reachable.
func PostgresDB(t testing.TB) string {
	t.Helper()
	admin := PostgresAdminDSN()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("PostgreSQL not reachable at %s: %v (start it, or set FENCEGATE_TEST_PG)", admin, err)
	}
	defer conn.Close(ctx)
	name := RandomName("fg_test_")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", admin, err)
	}
	u.Path = "/" + name
	return u.String()
}
