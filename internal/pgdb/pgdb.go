// Package pgdb creates and drops the throwaway databases (and drops the
// roles) of tests, demos and campaigns on a PostgreSQL server, as its
// administrator, and finds the
// server binaries and the user to start a throwaway server with. It imports
// nothing of fencegate, so that every package's tests can use it.
package pgdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultAdminDSN is the administrator's DSN of the local PostgreSQL
// server (127.0.0.1:5432, user postgres, trust or peer authentication):
// what the dev stack tries first, what a fault campaign and the tests use
// unless told otherwise.
const DefaultAdminDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Create creates database name (a plain identifier) on the server adminDSN,
// a superuser's, points at, and returns the administrator's DSN of the new
// database. Drop drops it again.
func Create(ctx context.Context, adminDSN, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL as the administrator: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return WithDatabase(adminDSN, name), nil
}

// Drop drops database name if it exists, closing its sessions
// (WITH (FORCE)), within 20 seconds.
func Drop(ctx context.Context, adminDSN, name string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// WithDatabase returns dsn (a URL) with its database replaced by db.
func WithDatabase(dsn, db string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/" + db
	return u.String()
}

// RandomName returns prefix followed by 12 random hex characters: a valid
// unquoted SQL identifier when prefix is one.
func RandomName(prefix string) string { return prefix + RandomHex(6) }

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ServerVersionNum connects to dsn and returns the server's
// server_version_num (180004 for 18.4).
func ServerVersionNum(ctx context.Context, dsn string) (int, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	var n int
	err = c.QueryRow(ctx, "SELECT pg_catalog.current_setting('server_version_num')::pg_catalog.int4").Scan(&n)
	return n, err
}

// DropRoles drops roles (those that exist) from the server adminDSN
// connects to, after dropping what they own and were granted in the
// databases dbs (a database already dropped is skipped) and in the
// database of adminDSN. It is how a run that created roles of its own
// leaves nothing behind.
func DropRoles(ctx context.Context, adminDSN string, dbs []string, roles ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return fmt.Errorf("drop roles %s: %w", strings.Join(roles, ", "), err)
	}
	defer c.Close(ctx)
	var idents []string
	for _, r := range roles {
		var exists bool
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", r).Scan(&exists); err != nil {
			return fmt.Errorf("look up role %s: %w", r, err)
		}
		if exists {
			idents = append(idents, pgx.Identifier{r}.Sanitize())
		}
	}
	if len(idents) == 0 {
		return nil
	}
	list := strings.Join(idents, ", ")
	var errs []error
	for _, db := range dbs {
		dc, err := pgx.Connect(ctx, WithDatabase(adminDSN, db))
		if err != nil {
			continue // the database is gone, and with it what the roles had there
		}
		if _, err := dc.Exec(ctx, "DROP OWNED BY "+list+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("drop what %s own in %s: %w", list, db, err))
		}
		dc.Close(ctx)
	}
	if _, err := c.Exec(ctx, "DROP OWNED BY "+list+" CASCADE"); err != nil {
		errs = append(errs, fmt.Errorf("drop what %s own: %w", list, err))
	}
	if _, err := c.Exec(ctx, "DROP ROLE "+list); err != nil {
		errs = append(errs, fmt.Errorf("drop roles %s: %w", list, err))
	}
	return errors.Join(errs...)
}
