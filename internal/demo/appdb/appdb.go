// Package appdb does for the examples what an administrator does once per
// application before it takes fenced locks: install schema fencegate,
// create the application's tables, protect them with a resource expression,
// and give an application role the grants it needs, nothing more.
//
// The examples run with no configuration against "fencegate dev", so they
// do these steps themselves with the administrator's DSN they are given,
// create the application role for the run (with a random password) and
// drop it, and their tables, at the end. In a real deployment the steps are
// commands an administrator runs once:
//
//	fencegate schema install --db ADMIN_DSN --grant app
//	psql ADMIN_DSN -c 'CREATE TABLE accounts (...)'
//	fencegate protect accounts --resource "'account:' || id" --db ADMIN_DSN
//	psql ADMIN_DSN -c 'GRANT SELECT, INSERT, UPDATE, DELETE ON accounts TO app'
package appdb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/fenceddb"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// Table is one table of the application.
type Table struct {
	// Name is the table's name.
	Name string
	// Create is the SQL that creates the table and fills it: it runs as the
	// administrator, who owns the table, before the table is protected.
	Create string
	// Resource is the resource expression over the table's columns that
	// names the resource each row belongs to ('account:' || id; a constant
	// such as 'ledger' makes the table one resource). Empty leaves the table
	// unprotected: its writes are not checked.
	Resource string
}

// Options tunes Setup.
type Options struct {
	// OwnerRole owns schema fencegate when Setup installs it (the default
	// is pgfence's: the schema's current owner, else fencegate_owner).
	OwnerRole string
	// RolePrefix starts the name of the application role (default
	// "fg_example_").
	RolePrefix string
	// OwnDatabase makes Setup create a database of the run's own on the
	// server of the administrator's DSN (its name is RolePrefix followed by
	// random hex) and do everything there, with an owner role of the run's
	// own unless OwnerRole names one; Close then drops the database and
	// that owner role, so the run leaves nothing on the server.
	OwnDatabase bool
}

// App is what Setup made: an application role and its tables.
type App struct {
	// Role and Password are the application role's credentials.
	Role, Password string
	// Database is the database the run uses: its own with
	// Options.OwnDatabase, else the administrator DSN's.
	Database string
	// AdminDSN is the administrator's DSN of Database.
	AdminDSN string

	serverDSN string // the administrator's DSN given to Setup
	ownDB     bool   // Database was created by Setup
	ownOwner  string // an owner role Setup created, dropped by Close
	adminDSN  string
	tables    []Table
}

// Setup installs (or upgrades) schema fencegate in the database of
// adminDSN, creates a login role for the application, creates the tables,
// protects those with a resource expression and grants the role SELECT,
// INSERT, UPDATE and DELETE on them. On error, what it made is removed.
func Setup(ctx context.Context, adminDSN string, tables []Table, opts Options) (*App, error) {
	if opts.RolePrefix == "" {
		opts.RolePrefix = "fg_example_"
	}
	a := &App{serverDSN: adminDSN, adminDSN: adminDSN, Role: pgdb.RandomName(opts.RolePrefix), Password: pgdb.RandomHex(16)}
	if u, err := url.Parse(adminDSN); err == nil {
		a.Database = strings.TrimPrefix(u.Path, "/")
	}
	if opts.OwnDatabase {
		name := pgdb.RandomName(opts.RolePrefix)
		dsn, err := pgdb.Create(ctx, adminDSN, name)
		if err != nil {
			return nil, fmt.Errorf("%w (is fencegate dev running? the -postgres DSN must be an administrator's)", err)
		}
		a.Database, a.adminDSN, a.ownDB = name, dsn, true
		if opts.OwnerRole == "" {
			opts.OwnerRole = name + "_owner"
			a.ownOwner = opts.OwnerRole
		}
	}
	a.AdminDSN = a.adminDSN
	admin, err := pgx.Connect(ctx, a.adminDSN)
	if err != nil {
		if a.ownDB {
			_ = a.Close()
		}
		return nil, fmt.Errorf("connect as the administrator: %w (is fencegate dev running?)", err)
	}
	defer admin.Close(context.Background())
	fail := func(err error) (*App, error) {
		admin.Close(context.Background())
		_ = a.Close()
		return nil, err
	}
	db, err := fenceddb.Setup(ctx, admin, fenceddb.Options{Owner: opts.OwnerRole, App: a.Role, AppPassword: a.Password})
	if err != nil {
		return fail(fmt.Errorf("set up roles and schema fencegate: %w (the -postgres DSN must be an administrator's)", err))
	}
	for _, t := range tables {
		if _, err := admin.Exec(ctx, t.Create); err != nil {
			return fail(fmt.Errorf("create table %s: %w", t.Name, err))
		}
		a.tables = append(a.tables, t)
		if err := db.Protect(ctx, admin, fenceddb.Table{Name: t.Name, Resource: t.Resource}); err != nil {
			return fail(fmt.Errorf("protect table %s: %w", t.Name, err))
		}
	}
	return a, nil
}

// DSN returns dsn (a URL: the fencegate proxy's, or PostgreSQL's) with the
// application role's credentials as its user and password, and, with
// Options.OwnDatabase, the run's database as its database.
func (a *App) DSN(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return "", errors.New("a DSN does not parse as a URL: want postgres://host:port/database")
	}
	u.User = url.UserPassword(a.Role, a.Password)
	if a.ownDB {
		u.Path = "/" + a.Database
	}
	return u.String(), nil
}

// Close drops the tables (unprotected first) and the application role. The
// schema and its marks stay: they belong to the database, not to one run.
// With Options.OwnDatabase it drops the run's database instead, then the
// application role and the owner role it created.
func (a *App) Close() error {
	if a.ownDB {
		return a.dropOwn()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, a.adminDSN)
	if err != nil {
		return fmt.Errorf("drop the example's tables and role %s: %w", a.Role, err)
	}
	defer admin.Close(context.Background())
	var errs []error
	for i := len(a.tables) - 1; i >= 0; i-- {
		t := a.tables[i]
		if t.Resource != "" {
			if err := pgfence.Unprotect(ctx, admin, t.Name); err != nil && !errors.Is(err, pgfence.ErrNotProtected) {
				errs = append(errs, fmt.Errorf("unprotect %s: %w", t.Name, err))
			}
		}
		if _, err := admin.Exec(ctx, "DROP TABLE IF EXISTS "+t.Name); err != nil {
			errs = append(errs, fmt.Errorf("drop table %s: %w", t.Name, err))
		}
	}
	// Its grants on schema fencegate, then the role. Its sessions through
	// the proxy may still be closing.
	if _, err := admin.Exec(ctx, "DROP OWNED BY "+a.Role); err != nil {
		errs = append(errs, fmt.Errorf("revoke the grants of %s: %w", a.Role, err))
	}
	if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+a.Role); err != nil {
		errs = append(errs, fmt.Errorf("drop role %s: %w", a.Role, err))
	}
	return errors.Join(errs...)
}

// dropOwn drops the run's own database, then its roles, which own nothing
// once the database is gone.
func (a *App) dropOwn() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgdb.Drop(ctx, a.serverDSN, a.Database); err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, a.serverDSN)
	if err != nil {
		return fmt.Errorf("drop the example's roles: %w", err)
	}
	defer admin.Close(context.Background())
	var errs []error
	for _, r := range []string{a.Role, a.ownOwner} {
		if r == "" {
			continue
		}
		if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("drop role %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}
