package pgfence_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// castPlantSQL makes the type of a column of the marks the application's,
// with an assignment cast to text whose function resets the role and makes
// {app} a superuser. Converting the column back to text (what version 1's
// upgrade does to give it COLLATE "C") calls that function once per row, in
// the installing superuser's session: SET ROLE there is no boundary.
const castPlantSQL = `CREATE TYPE public.atk_e AS ENUM ('x:1', 'x:2');
CREATE FUNCTION public.atk_pwn(public.atk_e) RETURNS text LANGUAGE plpgsql AS $f$ BEGIN BEGIN RESET ROLE; EXECUTE 'ALTER ROLE {app} SUPERUSER'; EXCEPTION WHEN others THEN NULL; END; RETURN pg_catalog.format('%s', $1); END $f$;
CREATE CAST (public.atk_e AS text) WITH FUNCTION public.atk_pwn(public.atk_e) AS ASSIGNMENT;`

// TestInstallRefusesColumnOfApplicationType: the owner of a database (not a
// superuser) pre-creates schema fencegate with marks whose resource is its
// own enum, cast to text by its own function; or, in a version 1
// deployment, the application role that owns the marks retypes the column
// so. Install and upgrade, as a superuser, refuse and name the column
// before any DDL runs: the cast function never runs, the role does not
// become a superuser.
func TestInstallRefusesColumnOfApplicationType(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		plant func(t *testing.T, db *pgfencetest.DB, app *pgx.Conn)
		opts  func(db *pgfencetest.DB) pgfence.InstallOptions
	}{
		{
			name: "install over a pre-created schema",
			plant: func(t *testing.T, db *pgfencetest.DB, app *pgx.Conn) {
				mustExec(t, app, strings.ReplaceAll(castPlantSQL, "{app}", db.App)+`
					CREATE SCHEMA fencegate;
					CREATE TABLE fencegate.marks (resource public.atk_e PRIMARY KEY, token bigint NOT NULL CHECK (token >= 0), updated_at timestamptz NOT NULL DEFAULT now());
					INSERT INTO fencegate.marks VALUES ('x:1', 1);`)
			},
			opts: func(db *pgfencetest.DB) pgfence.InstallOptions {
				return pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}}
			},
		},
		{
			name: "upgrade of version 1",
			plant: func(t *testing.T, db *pgfencetest.DB, app *pgx.Conn) {
				v1, err := os.ReadFile("testdata/schema_v1.sql")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := app.Exec(ctx, string(v1), pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatalf("install version 1 as the application role: %v", err)
				}
				mustExec(t, app, "INSERT INTO fencegate.marks VALUES ('x:1', 1)")
				mustExec(t, app, strings.ReplaceAll(castPlantSQL, "{app}", db.App)+`
					ALTER TABLE fencegate.marks ALTER COLUMN resource TYPE public.atk_e USING resource::public.atk_e;`)
			},
			opts: func(db *pgfencetest.DB) pgfence.InstallOptions {
				return pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
			name := pgx.Identifier{dbName(t, db.DSN)}.Sanitize()
			db.Exec(t, "ALTER DATABASE "+name+" OWNER TO "+db.App)
			t.Cleanup(func() { db.Exec(t, "ALTER DATABASE "+name+" OWNER TO CURRENT_USER") })
			app := db.AppConn(t)
			c.plant(t, db, app)
			admin := db.Admin(t)
			super := func() bool {
				t.Helper()
				var s bool
				if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = $1", db.App).Scan(&s); err != nil {
					t.Fatal(err)
				}
				return s
			}
			if super() {
				t.Fatalf("role %s is a superuser before the install", db.App)
			}
			_, err := pgfence.Install(ctx, admin, c.opts(db))
			if super() {
				t.Fatalf("role %s became a superuser: the install ran its cast function (install: %v)", db.App, err)
			}
			if !errors.Is(err, pgfence.ErrUnexpectedObjects) || !strings.Contains(err.Error(), "column fencegate.marks.resource has type public.atk_e, not a built-in type") {
				t.Fatalf("install = %v, want ErrUnexpectedObjects naming column fencegate.marks.resource", err)
			}
			t.Logf("refused: %v", err)
			var typ string
			if err := admin.QueryRow(ctx, "SELECT atttypid::regtype::text FROM pg_attribute WHERE attrelid = 'fencegate.marks'::regclass AND attname = 'resource'").Scan(&typ); err != nil {
				t.Fatal(err)
			}
			if typ != "atk_e" {
				t.Fatalf("after the refused install the column has type %s, want atk_e unchanged", typ)
			}
		})
	}
}
