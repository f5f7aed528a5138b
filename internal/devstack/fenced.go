package devstack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// AppPrivileges are the table privileges an application role needs on a
// protected table: never TRIGGER, REFERENCES, TRUNCATE or ownership, each of
// which would let it change or bypass the checks.
const AppPrivileges = "SELECT, INSERT, UPDATE, DELETE"

// FencedDB is a database with schema fencegate installed, the NOLOGIN role
// that owns it (and the protected tables), and an application role that
// holds only what taking fences and writing those tables needs.
type FencedDB struct {
	// AdminDSN connects to the database as the administrator.
	AdminDSN string
	// Owner is the NOLOGIN role that owns schema fencegate and the tables
	// PrepareTables protects.
	Owner string
	// App is the application LOGIN role.
	App string
	// AppPassword is the password FencedSetup gave App when it created it;
	// "" when App existed already (its password, if any, is its owner's).
	AppPassword string
	// Report is what pgfence.Install found and did.
	Report *pgfence.Report
}

// FencedOptions configures SetupFenced.
type FencedOptions struct {
	// AdminDSN connects as a superuser to the database to set up; another
	// role is refused with a message saying so.
	AdminDSN string
	// Owner names the role that owns schema fencegate; created NOLOGIN when
	// missing. The default is pgfence.DefaultOwnerRole.
	Owner string
	// App names the application role; created LOGIN, with a random
	// password, when missing, reused as it is otherwise. Required.
	App string
}

// SetupFenced installs or upgrades schema fencegate (pgfence.Install,
// idempotent: a current schema is left as it is and every mark is kept),
// creates the owner and application roles when missing, and grants the
// application role what taking fences needs. Roles are global to the
// server: they outlive the database, and whoever asked for them drops them.
func SetupFenced(ctx context.Context, o FencedOptions) (*FencedDB, error) {
	if o.App == "" {
		return nil, errors.New("devstack: no application role named")
	}
	if o.Owner == "" {
		o.Owner = pgfence.DefaultOwnerRole
	}
	conn, err := pgx.Connect(ctx, o.AdminDSN)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL as the administrator (%s): %w", Redact(o.AdminDSN), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	d := &FencedDB{AdminDSN: o.AdminDSN, Owner: o.Owner, App: o.App}
	var me string
	var super bool
	if err := conn.QueryRow(ctx, "SELECT current_user::text, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&me, &super); err != nil {
		return nil, fmt.Errorf("read the administrator's role: %w", err)
	}
	if !super {
		return nil, fmt.Errorf("PostgreSQL role %s is not a superuser: creating roles and installing schema fencegate need one; give the DSN of a superuser (such as postgres)", me)
	}
	if _, err := EnsureRole(ctx, conn, o.Owner, "NOLOGIN", ""); err != nil {
		return nil, err
	}
	pw := pgdb.RandomHex(16)
	created, err := EnsureRole(ctx, conn, o.App, "LOGIN", pw)
	if err != nil {
		return nil, err
	}
	if created {
		d.AppPassword = pw
	}
	var login bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper, rolcanlogin FROM pg_roles WHERE rolname = $1", o.App).Scan(&super, &login); err != nil {
		return nil, fmt.Errorf("read role %s: %w", o.App, err)
	}
	if super || !login {
		return nil, fmt.Errorf("role %s is a superuser or cannot log in: the gate refuses superusers; name another application role", o.App)
	}
	if d.Report, err = pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: o.Owner, Grant: []string{o.App}}); err != nil {
		return nil, err
	}
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
		// CREATE ROLE takes no parameters; the password is hex, quoted.
		sql += " PASSWORD '" + password + "'"
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return false, fmt.Errorf("create role %s: %w", name, err)
	}
	return true, nil
}

// ProtectTable gives table to the owner role, protects it with the resource
// expression expr and grants the application role AppPrivileges on it.
func (d *FencedDB) ProtectTable(ctx context.Context, conn *pgx.Conn, table, expr string) error {
	if _, err := conn.Exec(ctx, "ALTER TABLE "+table+" OWNER TO "+pgx.Identifier{d.Owner}.Sanitize()); err != nil {
		return fmt.Errorf("give %s to %s: %w", table, d.Owner, err)
	}
	if err := pgfence.Protect(ctx, conn, table, expr); err != nil {
		return err
	}
	return d.Grant(ctx, conn, table)
}

// Grant grants the application role AppPrivileges on table.
func (d *FencedDB) Grant(ctx context.Context, conn *pgx.Conn, table string) error {
	if _, err := conn.Exec(ctx, "GRANT "+AppPrivileges+" ON "+table+" TO "+pgx.Identifier{d.App}.Sanitize()); err != nil {
		return fmt.Errorf("grant %s on %s to %s: %w", AppPrivileges, table, d.App, err)
	}
	return nil
}

// AppDSN is dsn with the application role as its user and no password,
// pointed at host (HOST:PORT) when host is not empty. The password, when
// one is needed, goes in PGPASSWORD or a passfile, never in a DSN that
// could be printed or logged.
func (d *FencedDB) AppDSN(host string) string {
	u, err := url.Parse(d.AdminDSN)
	if err != nil {
		return d.AdminDSN
	}
	u.User = url.User(d.App)
	if host != "" {
		u.Host = host
	}
	return u.String()
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
		dc, err := pgx.Connect(ctx, pgdb.WithDatabase(adminDSN, db))
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

// CreateFenced creates database name on the server adminDSN points at and
// sets it up with SetupFenced, with two roles of its own: name_owner and
// name_app. DropFenced removes all three, also after a failed CreateFenced.
func CreateFenced(ctx context.Context, adminDSN, name string) (*FencedDB, error) {
	dsn, err := pgdb.Create(ctx, adminDSN, name)
	if err != nil {
		return nil, err
	}
	return SetupFenced(ctx, FencedOptions{AdminDSN: dsn, Owner: name + "_owner", App: name + "_app"})
}

// DropFenced drops database name, then roles name_app and name_owner: what
// CreateFenced, or Start with StackConfig.Throwaway, made.
func DropFenced(ctx context.Context, adminDSN, name string) error {
	return errors.Join(pgdb.Drop(ctx, adminDSN, name),
		DropRoles(ctx, adminDSN, []string{name}, name+"_app", name+"_owner"))
}

// DatabaseOf returns the database a DSN (a URL) names, "" when none.
func DatabaseOf(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}
