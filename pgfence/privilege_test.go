package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// reasons runs PrivilegeQuery as role on the database of dsn, over the
// simple protocol, as the gate does at startup.
func reasons(t *testing.T, dsn, role string) []string {
	t.Helper()
	conn := pgfencetest.Connect(t, pgfencetest.WithUser(t, dsn, role))
	rows, err := conn.Query(context.Background(), pgfence.PrivilegeQuery, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("PrivilegeQuery as %s: %v", role, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("PrivilegeQuery as %s: %v", role, err)
	}
	conn.Close(context.Background())
	return out
}

func TestPrivilegeQuery(t *testing.T) {
	f := newFixture(t)
	dsn := f.db.DSN
	role := func(prefix, attrs string) string { return pgfencetest.Role(t, dsn, prefix, attrs) }
	typeOwner := role("fg_typeown_", "LOGIN")
	nspOwner := role("fg_nspown_", "LOGIN")
	mustExec(t, f.admin, "CREATE TYPE public.mood AS ENUM ('ok'); ALTER TYPE public.mood OWNER TO "+typeOwner+
		"; CREATE SCHEMA ledger AUTHORIZATION "+nspOwner+"; CREATE TABLE ledger.book (id int, m public.mood); SELECT fencegate.protect('ledger.book', $$'book:' || id$$)")
	tableOwner := role("fg_tabown_", "LOGIN")
	mustExec(t, f.admin, "CREATE TABLE public.acct (id int); ALTER TABLE public.acct OWNER TO "+tableOwner+"; SELECT fencegate.protect('public.acct', $$'acct:' || id$$)")
	partOwner := role("fg_partown_", "LOGIN")
	mustExec(t, f.admin, "ALTER TABLE shop.events_p1b OWNER TO "+partOwner)
	plainOwner := role("fg_plain_", "LOGIN")
	mustExec(t, f.admin, "CREATE TABLE public.free (id int); ALTER TABLE public.free OWNER TO "+plainOwner)

	for _, c := range []struct {
		name, role string
		want       string // "" = no rows
	}{
		{"an application role", f.db.App, ""},
		{"owner of an unprotected table", plainOwner, ""},
		{"a superuser", "postgres", "is a superuser"},
		{"CREATEROLE", role("fg_cr_", "LOGIN CREATEROLE"), "has CREATEROLE"},
		{"member of the owner role", func() string {
			r := role("fg_mem_", "LOGIN")
			mustExec(t, f.admin, "GRANT "+f.db.Owner+" TO "+r)
			return r
		}(), "which owns schema fencegate"},
		{"member of it without INHERIT", func() string {
			r := role("fg_noinh_", "LOGIN NOINHERIT")
			mustExec(t, f.admin, "GRANT "+f.db.Owner+" TO "+r)
			return r
		}(), "which owns schema fencegate"},
		{"owner of a protected table", tableOwner, "owns protected table public.acct"},
		{"member of a protected table's owner", func() string {
			r := role("fg_tabmem_", "LOGIN")
			mustExec(t, f.admin, "GRANT "+f.data+" TO "+r)
			return r
		}(), "which owns protected table shop.orders"},
		{"member of a member of the owner", func() string {
			mid := role("fg_mid_", "NOLOGIN")
			r := role("fg_deep_", "LOGIN")
			mustExec(t, f.admin, "GRANT "+f.db.Owner+" TO "+mid+"; GRANT "+mid+" TO "+r)
			return r
		}(), "which owns schema fencegate"},
		{"owner of a partition", partOwner, "owns protected table shop.events_p1b"},
		{"owner of the schema of a protected table", nspOwner, "schema ledger, which holds protected table ledger.book"},
		{"owner of a column type", typeOwner, "owns type public.mood of a column of protected table ledger.book"},
		{"owner of a fencegate function", func() string {
			r := role("fg_fnown_", "LOGIN")
			mustExec(t, f.admin, "ALTER FUNCTION fencegate.tree(regclass) OWNER TO "+r)
			return r
		}(), "owns function fencegate.tree(regclass)"},
		{"pg_write_server_files", func() string {
			r := role("fg_files_", "LOGIN")
			mustExec(t, f.admin, "GRANT pg_write_server_files TO "+r)
			return r
		}(), "write the server's files"},
		{"pg_execute_server_program", func() string {
			r := role("fg_prog_", "LOGIN")
			mustExec(t, f.admin, "GRANT pg_execute_server_program TO "+r)
			return r
		}(), "run programs on the server"},
		// Role attributes are not inherited, but SET ROLE needs only
		// membership: a member of a superuser, CREATEROLE or REPLICATION
		// role takes that role's attributes with one statement.
		{"member of a superuser role", func() string {
			su := role("fg_su_", "NOLOGIN SUPERUSER")
			r := role("fg_sumem_", "LOGIN NOINHERIT")
			mustExec(t, f.admin, "GRANT "+su+" TO "+r)
			return r
		}(), "which is a superuser (SET ROLE makes it one)"},
		{"member of a CREATEROLE role", func() string {
			cr := role("fg_crg_", "NOLOGIN CREATEROLE")
			r := role("fg_crmem_", "LOGIN")
			mustExec(t, f.admin, "GRANT "+cr+" TO "+r)
			return r
		}(), "which has CREATEROLE"},
		{"REPLICATION", role("fg_repl_", "LOGIN REPLICATION"), "has REPLICATION, so it can copy the database's files (BASE_BACKUP"},
		{"member of a REPLICATION role", func() string {
			rr := role("fg_replg_", "NOLOGIN REPLICATION")
			r := role("fg_replmem_", "LOGIN")
			mustExec(t, f.admin, "GRANT "+rr+" TO "+r)
			return r
		}(), "which has REPLICATION, so it can decode every change"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := reasons(t, dsn, c.role)
			if c.want == "" {
				if len(got) != 0 {
					t.Fatalf("PrivilegeQuery as %s = %q, want no rows", c.role, got)
				}
				return
			}
			found := false
			for _, r := range got {
				found = found || strings.Contains(r, c.want)
			}
			if !found {
				t.Fatalf("PrivilegeQuery as %s = %q, want a row with %q", c.role, got, c.want)
			}
		})
	}
}

// TestPrivilegeQueryWithoutSchema: the query runs on a database that has no
// schema fencegate.
func TestPrivilegeQueryWithoutSchema(t *testing.T) {
	dsn := testutil.PostgresDB(t)
	app := pgfencetest.Role(t, dsn, "fg_app_", "LOGIN")
	if got := reasons(t, dsn, app); len(got) != 0 {
		t.Fatalf("PrivilegeQuery as an ordinary role = %q", got)
	}
	if got := reasons(t, dsn, "postgres"); len(got) != 1 || !strings.Contains(got[0], "superuser") {
		t.Fatalf("PrivilegeQuery as postgres = %q", got)
	}
	// Readers of every table or of the server's files are refused before
	// the database holds signing keys: a session admitted now would read
	// the keys of the next require-signed, and the files hold those of
	// every database.
	for _, grp := range []string{"pg_read_all_data", "pg_read_server_files"} {
		r := pgfencetest.Role(t, dsn, "fg_reader_", "LOGIN")
		if _, err := pgfencetest.Connect(t, dsn).Exec(context.Background(), "GRANT "+grp+" TO "+r); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(reasons(t, dsn, r), "\n"); !strings.Contains(got, grp+", which can read the signing keys") {
			t.Errorf("PrivilegeQuery as a member of %s, on a database without keys = %q, want the signing keys reason", grp, got)
		}
	}
}

// TestInstallPrivileges: who may install what, and a refused install
// leaves nothing behind.
func TestInstallPrivileges(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	plain := pgfencetest.Connect(t, db.AppDSN)
	_, err := pgfence.Install(ctx, plain, pgfence.InstallOptions{OwnerRole: db.Owner + "_x"})
	if !errors.Is(err, pgfence.ErrPrivilege) || !strings.Contains(err.Error(), "CREATEROLE") {
		t.Fatalf("Install as a plain role: %v", err)
	}
	_, err = pgfence.Install(ctx, plain, pgfence.InstallOptions{OwnerRole: db.Owner})
	if !errors.Is(err, pgfence.ErrPrivilege) || !strings.Contains(err.Error(), "member of the owner role") {
		t.Fatalf("Install as a non-member: %v", err)
	}
	_, err = pgfence.Install(ctx, plain, pgfence.InstallOptions{OwnerRole: db.Owner, GuardDDL: true})
	if !errors.Is(err, pgfence.ErrPrivilege) || !strings.Contains(err.Error(), "superuser") {
		t.Fatalf("Install --guard-ddl as a plain role: %v", err)
	}
	db.Exec(t, "GRANT "+db.Owner+" TO "+db.App)
	_, err = pgfence.Install(ctx, plain, pgfence.InstallOptions{OwnerRole: db.Owner})
	if !errors.Is(err, pgfence.ErrPrivilege) || !strings.Contains(err.Error(), "CREATE on the database") {
		t.Fatalf("Install by a member without CREATE: %v", err)
	}
	admin := db.Admin(t)
	_, err = pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{"fg_nobody_" + db.Owner}})
	if !errors.Is(err, pgfence.ErrNoRole) {
		t.Fatalf("Install granting a missing role: %v", err)
	}
	_, err = pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: "postgres"})
	if !errors.Is(err, pgfence.ErrOwnerRole) {
		t.Fatalf("Install owned by a superuser: %v", err)
	}
	st, err := pgfence.Inspect(ctx, admin)
	if err != nil || st.Installed {
		t.Fatalf("refused installs left a schema behind: %+v %v", st, err)
	}
	// A member of the owner role with CREATE on the database installs.
	db.Exec(t, "GRANT CREATE ON DATABASE "+dbName(t, db.DSN)+" TO "+db.App)
	rep, err := pgfence.Install(ctx, plain, pgfence.InstallOptions{OwnerRole: db.Owner})
	if err != nil {
		t.Fatalf("Install by a member of the owner role: %v", err)
	}
	if got := health(t, admin); len(got) != 0 || rep.OwnerRole != db.Owner {
		t.Fatalf("after a member's install: %q", got)
	}
}

// TestInstallRevokesChainedGrants: a privilege on schema fencegate's objects
// granted WITH GRANT OPTION and passed on by its holder is revoked with
// what it was passed on to; install used to stop on PostgreSQL's
// "dependent privileges exist" and repair nothing, while the gate refused
// every session of the database.
func TestInstallRevokesChainedGrants(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	holder := pgfencetest.Role(t, db.DSN, "fg_holder_", "NOLOGIN")
	db.Exec(t, fmt.Sprintf(`GRANT USAGE ON SCHEMA fencegate TO %[1]s WITH GRANT OPTION;
		GRANT SELECT, UPDATE ON fencegate.audit TO %[1]s WITH GRANT OPTION;
		SET ROLE %[1]s;
		GRANT SELECT, UPDATE ON fencegate.audit TO %[2]s;
		RESET ROLE`, holder, db.App))
	if got := strings.Join(health(t, admin), "\n"); !strings.Contains(got, "UPDATE on fencegate.audit is granted to "+db.App) {
		t.Fatalf("HealthQuery = %q, want the passed-on grant named", got)
	}
	if _, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner}); err != nil {
		t.Fatalf("Install over a passed-on grant: %v", err)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery after Install = %q", got)
	}
}
