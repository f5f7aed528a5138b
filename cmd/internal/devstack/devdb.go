package devstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/jackc/pgx/v5"
)

// Defaults of the database "fencegate dev" sets up for applications. The
// roles are global to the PostgreSQL server and stay when the stack stops
// (the next start reuses them); see docs/dev.md to remove them.
const (
	DefaultDatabase = "fencegate_dev"
	DefaultAppRole  = "fencegate_app"
)

// roleComment marks an application role the dev stack created: its
// password is in the pgpass file of the data directory that created it.
const roleComment = "application role created by fencegate dev"

// DemoTablesSQL creates the dev stack's demo tables when missing: order 42
// and its charges, each row belonging to resource 'order:<id>'.
const DemoTablesSQL = `
CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL, state text NOT NULL);
CREATE TABLE IF NOT EXISTS charges (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id int NOT NULL REFERENCES orders,
  amount_cents bigint NOT NULL, by_client text NOT NULL, token bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());`

// Resource expressions of the demo tables.
const (
	OrdersResource  = `'order:' || id`
	ChargesResource = `'order:' || order_id`
)

// setupDatabase creates the stack's database when missing, installs or
// upgrades schema fencegate in it, creates the roles when missing and the
// demo tables, protected.
func (s *Stack) setupDatabase(ctx context.Context, cfg *stackConfig) error {
	admin, err := pgx.Connect(ctx, s.Postgres.DSN)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL as the administrator: %w", err)
	}
	var exists, super bool
	err = admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1), (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)", cfg.Database).Scan(&exists, &super)
	if err == nil && !super {
		err = fmt.Errorf("%s connects as a role that is not a superuser; the dev stack installs schema fencegate and creates roles: pass %s with a superuser's DSN", cfg.flag("postgres"), cfg.flag("postgres"))
	}
	if err == nil && !exists {
		_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize())
	}
	admin.Close(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("database %s: %w", cfg.Database, err)
	}
	if s.DB, err = SetupFenced(ctx, FencedOptions{AdminDSN: pgdb.WithDatabase(s.Postgres.DSN, cfg.Database), Owner: cfg.OwnerRole, App: cfg.AppRole}); err != nil {
		return fmt.Errorf("set up database %s: %w", cfg.Database, err)
	}
	conn, err := pgx.Connect(ctx, s.DB.AdminDSN)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", cfg.Database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := s.passfile(ctx, conn, cfg); err != nil {
		return err
	}
	// Order 42 goes in before the tables are protected: a protected table
	// refuses unfenced writes from everybody, and a fence needs a token,
	// which a fresh stack must not use up (its first token is 1).
	var fresh bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('orders') IS NULL").Scan(&fresh); err != nil {
		return fmt.Errorf("look up table orders: %w", err)
	}
	if _, err := conn.Exec(ctx, DemoTablesSQL); err != nil {
		return fmt.Errorf("create the demo tables: %w", err)
	}
	if fresh {
		if _, err := conn.Exec(ctx, orderSQL); err != nil {
			return fmt.Errorf("insert order 42: %w", err)
		}
	}
	if err := s.DB.Protect(ctx, conn, Protected("orders", OrdersResource)); err != nil {
		return err
	}
	if err := s.DB.Protect(ctx, conn, Protected("charges", ChargesResource)); err != nil {
		return err
	}
	// An existing table that lost order 42: inserted as the administrator,
	// under a fence at the resource's current mark (never lower), or at
	// token 1 when it has none.
	var have bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM orders WHERE id = 42)").Scan(&have); err != nil || have {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	var tok int64
	if err := tx.QueryRow(ctx, "SELECT coalesce((SELECT token FROM fencegate.marks WHERE resource = $1), 1)", "order:42").Scan(&tok); err != nil {
		return fmt.Errorf("read the mark of order 42: %w", err)
	}
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:42", tok); err != nil {
		return fmt.Errorf("fence order 42: %w", err)
	}
	if _, err := tx.Exec(ctx, orderSQL); err != nil {
		return fmt.Errorf("insert order 42: %w", err)
	}
	return tx.Commit(ctx)
}

// orderSQL inserts the demo's order 42, unpaid.
const orderSQL = "INSERT INTO orders VALUES (42, 'Alice', 4999, 'unpaid')"

// passfile makes sure the application role's password, when the stack
// knows it, is in DataDir/pgpass (mode 0600), and sets s.Passfile. The
// stack never changes the password of a role that exists: another data
// directory's stack may connect with it. A role the stack did not create
// is used as it is, without a passfile; a role some "fencegate dev"
// created whose password this data directory does not hold is refused,
// with what to do instead.
func (s *Stack) passfile(ctx context.Context, conn *pgx.Conn, cfg *stackConfig) error {
	path := filepath.Join(s.DataDir, "pgpass")
	pw := s.DB.AppPassword
	if pw == "" {
		if known, ok := readPassfile(path, s.DB.App); ok {
			s.Passfile = path
			s.DB.AppPassword = known
			return nil
		}
		var comment *string
		if err := conn.QueryRow(ctx, "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1", s.DB.App).Scan(&comment); err != nil {
			return fmt.Errorf("read role %s: %w", s.DB.App, err)
		}
		if comment == nil || *comment != roleComment {
			return nil
		}
		return fmt.Errorf("role %s was created by fencegate dev with another data directory and %s does not hold its password, which dev leaves alone: pass %s NAME for a role of this data directory, %s of the stack that created it, or drop the role (see docs/dev.md)",
			s.DB.App, path, cfg.flag("app-role"), cfg.flag("data-dir"))
	}
	if _, err := conn.Exec(ctx, "COMMENT ON ROLE "+pgx.Identifier{s.DB.App}.Sanitize()+" IS '"+roleComment+"'"); err != nil {
		return fmt.Errorf("comment on role %s: %w", s.DB.App, err)
	}
	line := "*:*:*:" + s.DB.App + ":" + pw + "\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	s.Passfile = path
	return nil
}

// readPassfile returns the password of role in a pgpass file written by
// passfile.
func readPassfile(path, role string) (string, bool) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) || err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pw, ok := strings.CutPrefix(sc.Text(), "*:*:*:"+role+":"); ok {
			return pw, true
		}
	}
	return "", false
}
