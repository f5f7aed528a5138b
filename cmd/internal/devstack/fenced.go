package devstack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
	"github.com/jackc/pgx/v5"
)

// FencedDB is a database fenceddb set up (schema fencegate, the NOLOGIN
// role that owns it and the tables it protects, an application role that
// holds only what taking fences and writing those tables needs), with the
// administrator's DSN and the password SetupFenced gave the application
// role.
type FencedDB struct {
	*fenceddb.DB
	// AdminDSN connects to the database as the administrator.
	AdminDSN string
	// AppPassword is the password SetupFenced gave App when it created it;
	// "" when App existed already (its password, if any, is its owner's).
	AppPassword string
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

// SetupFenced checks that AdminDSN is a superuser's, then does what
// fenceddb.Setup does: installs or upgrades schema fencegate
// (pgfence.Install, idempotent: a current schema is left as it is and every
// mark is kept), creates the owner and application roles when missing, and
// grants the application role what taking fences needs. Roles are global to
// the server: they outlive the database, and whoever asked for them drops
// them.
func SetupFenced(ctx context.Context, o FencedOptions) (*FencedDB, error) {
	if o.App == "" {
		return nil, errors.New("devstack: no application role named")
	}
	if o.Owner == "" {
		o.Owner = pgfence.DefaultOwnerRole
	}
	conn, err := pgx.Connect(ctx, o.AdminDSN)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL as the administrator (%s): %w", servers.Redact(o.AdminDSN), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	d := &FencedDB{AdminDSN: o.AdminDSN}
	var me string
	var super bool
	if err := conn.QueryRow(ctx, "SELECT current_user::text, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&me, &super); err != nil {
		return nil, fmt.Errorf("read the administrator's role: %w", err)
	}
	if !super {
		return nil, fmt.Errorf("PostgreSQL role %s is not a superuser: creating roles and installing schema fencegate need one; give the DSN of a superuser (such as postgres)", me)
	}
	pw := pgdb.RandomHex(16)
	if d.DB, err = fenceddb.Setup(ctx, conn, fenceddb.Options{Owner: o.Owner, App: o.App, AppPassword: pw}); err != nil {
		return nil, err
	}
	if d.AppCreated {
		d.AppPassword = pw
	}
	return d, nil
}

// Protected is the table of a FencedDB protected with the resource
// expression expr, given to the owner role first: what FencedDB.Protect
// takes for the tables of the dev stack, the demos and the campaign.
func Protected(table, expr string) fenceddb.Table {
	return fenceddb.Table{Name: table, Resource: expr, ToOwner: true}
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
// CreateFenced, or StartThrowaway, made.
func DropFenced(ctx context.Context, adminDSN, name string) error {
	return errors.Join(pgdb.Drop(ctx, adminDSN, name),
		pgdb.DropRoles(ctx, adminDSN, []string{name}, name+"_app", name+"_owner"))
}

// DatabaseOf returns the database a DSN (a URL) names, "" when none.
func DatabaseOf(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}
