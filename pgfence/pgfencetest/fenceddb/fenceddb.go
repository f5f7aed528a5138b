// Package fenceddb makes a database ready for fenced writes, as an
// administrator does once per application: it creates the role that owns
// schema fencegate and the application role, installs the schema with the
// application role's grants, and protects tables and grants the
// application role what writing them needs. It is the one builder of a
// fenced database: the tests' throwaway databases (pgfencetest), the dev
// stack's and the demos' are all built with it; each decides its own
// names, passwords and cleanup.
//
// It creates and drops no database, and drops no role: internal/pgdb does
// that. It imports neither package testing nor anything above pgfence, so
// the fencegate binary's dev stack can use it as the tests do; it sits
// under pgfencetest because it is not a stable API either.
package fenceddb

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// AppPrivileges are the table privileges an application role needs on a
// protected table: never TRIGGER, REFERENCES, TRUNCATE or ownership, each of
// which would let it change or bypass the checks.
const AppPrivileges = "SELECT, INSERT, UPDATE, DELETE"

// Options says what Setup makes.
type Options struct {
	// Owner names the role that owns schema fencegate; created NOLOGIN when
	// missing. Empty leaves the choice to pgfence.Install (the schema's
	// current owner, else pgfence.DefaultOwnerRole, created when missing).
	Owner string
	// App names the application role; created LOGIN, with AppPassword when
	// that is not empty, when missing, and used as it is otherwise (it must
	// be able to log in and not be a superuser). Required.
	App string
	// AppPassword is the password App is created with; empty creates it
	// without one.
	AppPassword string
	// GuardDDL installs the DDL guard (pgfence.InstallOptions.GuardDDL).
	GuardDDL bool
	// NoInstall creates the roles only, leaving the database without
	// schema fencegate.
	NoInstall bool
}

// DB is a database Setup made ready.
type DB struct {
	// Owner is the role that owns schema fencegate: Options.Owner, or the
	// one pgfence.Install chose.
	Owner string
	// App is the application role.
	App string
	// AppCreated says whether Setup created App (with Options.AppPassword).
	AppCreated bool
	// Report is what pgfence.Install found and did; nil with NoInstall.
	Report *pgfence.Report
}

// Setup creates the roles when missing and installs or upgrades schema
// fencegate (pgfence.Install, idempotent: a current schema is left as it is
// and every mark is kept) in the database conn, a superuser's session, is
// connected to, granting the application role what taking fences needs.
// Roles are global to the server: they outlive the database, and whoever
// asked for them drops them (pgdb.DropRoles). On error, what was made stays for
// the caller's cleanup.
func Setup(ctx context.Context, conn *pgx.Conn, o Options) (*DB, error) {
	if o.App == "" {
		return nil, errors.New("fenceddb: no application role named")
	}
	d := &DB{Owner: o.Owner, App: o.App}
	if o.Owner != "" {
		if _, err := EnsureRole(ctx, conn, o.Owner, "NOLOGIN", ""); err != nil {
			return nil, err
		}
	}
	var err error
	if d.AppCreated, err = EnsureRole(ctx, conn, o.App, "LOGIN", o.AppPassword); err != nil {
		return nil, err
	}
	if !d.AppCreated {
		var super, login bool
		if err := conn.QueryRow(ctx, "SELECT rolsuper, rolcanlogin FROM pg_roles WHERE rolname = $1", o.App).Scan(&super, &login); err != nil {
			return nil, fmt.Errorf("read role %s: %w", o.App, err)
		}
		if super || !login {
			return nil, fmt.Errorf("role %s is a superuser or cannot log in: the gate refuses superusers; name another application role", o.App)
		}
	}
	if o.NoInstall {
		return d, nil
	}
	if d.Report, err = pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: o.Owner, Grant: []string{o.App}, GuardDDL: o.GuardDDL}); err != nil {
		return nil, err
	}
	d.Owner = d.Report.OwnerRole
	return d, nil
}

// EnsureRole creates role name with attrs ("LOGIN", "NOLOGIN") and, when
// password is not empty, that password, unless the role exists; created
// says whether it did.
func EnsureRole(ctx context.Context, conn *pgx.Conn, name, attrs, password string) (created bool, err error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", name).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up role %s: %w", name, err)
	}
	if exists {
		return false, nil
	}
	sql := "CREATE ROLE " + pgx.Identifier{name}.Sanitize() + " " + attrs
	if password != "" {
		// CREATE ROLE takes no parameters; quote the password as a literal.
		sql += " PASSWORD '" + strings.ReplaceAll(password, "'", "''") + "'"
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return false, fmt.Errorf("create role %s: %w", name, err)
	}
	return true, nil
}

// Table is a table Protect makes writable by the application role.
type Table struct {
	// Name is the table's name, as SQL (quote it when it needs quotes).
	Name string
	// Resource is the resource expression over the table's columns that
	// names the resource each row belongs to. Empty leaves the table
	// unprotected: it is only granted.
	Resource string
	// ToOwner gives the table to the owner role of schema fencegate first,
	// so that no login role owns it. By default its owner stays.
	ToOwner bool
}

// Protect gives t to the owner role (with ToOwner), protects it with its
// resource expression (when it has one) and grants the application role
// AppPrivileges on it.
func (d *DB) Protect(ctx context.Context, conn *pgx.Conn, t Table) error {
	if t.ToOwner {
		if _, err := conn.Exec(ctx, "ALTER TABLE "+t.Name+" OWNER TO "+pgx.Identifier{d.Owner}.Sanitize()); err != nil {
			return fmt.Errorf("give %s to %s: %w", t.Name, d.Owner, err)
		}
	}
	if t.Resource != "" {
		if err := pgfence.Protect(ctx, conn, t.Name, t.Resource); err != nil {
			return err
		}
	}
	return d.Grant(ctx, conn, t.Name)
}

// Grant grants the application role AppPrivileges on table.
func (d *DB) Grant(ctx context.Context, conn *pgx.Conn, table string) error {
	if _, err := conn.Exec(ctx, "GRANT "+AppPrivileges+" ON "+table+" TO "+pgx.Identifier{d.App}.Sanitize()); err != nil {
		return fmt.Errorf("grant %s on %s to %s: %w", AppPrivileges, table, d.App, err)
	}
	return nil
}
