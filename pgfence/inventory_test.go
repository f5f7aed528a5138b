package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// TestInventoryExpected keeps the expected inventory (inventoryExpected in
// health_functions.go) in step with the embedded SQL: it installs the schema
// (with the DDL guard) into an empty database and compares what
// InventoryQuery lists with the list in the source. On a mismatch it prints
// the list to paste; -update writes it.
func TestInventoryExpected(t *testing.T) {
	db := pgfencetest.New(t, pgfencetest.Options{GuardDDL: true})
	conn := db.Admin(t)
	if err := pgfence.AdminSession(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(context.Background(), pgfence.InventoryQuery)
	if err != nil {
		t.Fatal(err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([4]string, error) {
		var it [4]string
		err := r.Scan(&it[0], &it[1], &it[2], &it[3])
		return it, err
	})
	if err != nil {
		t.Fatal(err)
	}
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	var b strings.Builder
	for i, it := range items {
		sep := ","
		if i == len(items)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "\t(%s, %s, %s, %s)%s\n", lit(it[0]), lit(it[1]), lit(it[2]), lit(it[3]), sep)
	}
	if strings.Contains(b.String(), "`") {
		t.Fatalf("the inventory holds a backquote, which a Go raw string cannot:\n%s", b.String())
	}
	src, err := os.ReadFile("health_functions.go")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "const inventoryExpected = `"
	head, tail, ok := strings.Cut(string(src), marker)
	if !ok {
		t.Fatal("health_functions.go: no const inventoryExpected")
	}
	cur, rest, ok := strings.Cut(tail, "`")
	if !ok {
		t.Fatal("health_functions.go: const inventoryExpected is not closed")
	}
	if cur == b.String() {
		return
	}
	if *update {
		if err := os.WriteFile("health_functions.go", []byte(head+marker+b.String()+"`"+rest), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("health_functions.go is out of step with the embedded SQL; replace inventoryExpected with:\n%s", b.String())
}

// plantSQL plants, as the role that owned the marks ({role}), code and
// privileges that fencegate did not create on its objects: a CHECK, an
// expression index, a policy and a rule calling the application's
// function, a trigger calling its trigger function, a column default
// replaced by its function, an extra column, a table grant and a column
// grant to another role, a type and a function in schema fencegate, and
// default privileges in the schema.
const plantSQL = `SET ROLE {role};
ALTER TABLE fencegate.marks ADD CONSTRAINT planted_check CHECK (appx.ok(token) AND appx.ok(length(resource)));
CREATE TRIGGER planted_trg BEFORE INSERT OR UPDATE ON fencegate.marks FOR EACH ROW EXECUTE FUNCTION appx.trg();
CREATE POLICY planted_pol ON fencegate.marks USING (appx.ok(token));
CREATE RULE planted_rule AS ON DELETE TO fencegate.marks DO ALSO SELECT appx.ok(OLD.token);
CREATE INDEX planted_idx ON fencegate.marks (appx.ok(length(resource)));
ALTER TABLE fencegate.marks ALTER COLUMN updated_at SET DEFAULT appx.stamp();
ALTER TABLE fencegate.marks ADD COLUMN planted_col int DEFAULT 0;
GRANT UPDATE ON fencegate.marks TO {other};
GRANT UPDATE (token) ON fencegate.marks TO {other};
CREATE TYPE fencegate.planted_type AS (a int);
CREATE FUNCTION fencegate.planted_fn() RETURNS int LANGUAGE sql AS 'SELECT 1';
ALTER DEFAULT PRIVILEGES IN SCHEMA fencegate GRANT ALL ON TABLES TO {other};
RESET ROLE`

// appFunctionsSQL creates the application's own functions that the planted
// objects call. appx.ok fails when it runs as any role but the application
// role: code the application attached to fencegate's objects must never run
// as the owner role or the installer (an upgrade that rewrites the marks
// evaluates their CHECK constraints and rebuilds their indexes).
const appFunctionsSQL = `CREATE SCHEMA appx AUTHORIZATION {app};
GRANT USAGE ON SCHEMA appx TO PUBLIC;
SET ROLE {app};
CREATE FUNCTION appx.ok(bigint) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$BEGIN
	IF current_user <> '{app}' THEN RAISE EXCEPTION 'the application''s code ran as %', current_user; END IF;
	RETURN true;
END$$;
CREATE FUNCTION appx.ok(integer) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT appx.ok($1::bigint)';
CREATE FUNCTION appx.trg() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE FUNCTION appx.stamp() RETURNS timestamptz LANGUAGE sql AS 'SELECT now()';
RESET ROLE`

// plantedSigningKeysSQL is a signing_keys table the application creates
// before fencegate does, with a CHECK that calls its own function on every
// key written.
const plantedSigningKeysSQL = `SET ROLE {app};
CREATE TABLE fencegate.signing_keys (
	key_id text COLLATE "C" PRIMARY KEY, cluster_id text NOT NULL, message_prefix bytea NOT NULL,
	inner_pad bytea NOT NULL CHECK (octet_length(inner_pad) = 64), outer_pad bytea NOT NULL CHECK (octet_length(outer_pad) = 64),
	position integer NOT NULL, added_at timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT planted_key_check CHECK (appx.ok(position)));
RESET ROLE`

// leftoversSQL lists what remains of the planted objects.
const leftoversSQL = `SELECT 'constraint ' || conname FROM pg_constraint WHERE conname LIKE 'planted%'
UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE tgname LIKE 'planted%'
UNION ALL SELECT 'policy ' || polname FROM pg_policy WHERE polname LIKE 'planted%'
UNION ALL SELECT 'rule ' || rulename FROM pg_rewrite WHERE rulename LIKE 'planted%'
UNION ALL SELECT 'relation ' || relname FROM pg_class WHERE relname LIKE 'planted%'
UNION ALL SELECT 'column ' || attname FROM pg_attribute WHERE attrelid = 'fencegate.marks'::regclass AND attname LIKE 'planted%' AND NOT attisdropped
UNION ALL SELECT 'type ' || typname FROM pg_type WHERE typname LIKE 'planted%'
UNION ALL SELECT 'function ' || proname FROM pg_proc WHERE proname LIKE 'planted%'
UNION ALL SELECT 'column grant on ' || attname FROM pg_attribute WHERE attrelid IN ('fencegate.marks'::regclass, 'fencegate.signing_keys'::regclass) AND attacl IS NOT NULL
UNION ALL SELECT 'default ' || pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d WHERE d.adrelid = 'fencegate.marks'::regclass AND pg_get_expr(d.adbin, d.adrelid) <> 'now()'
UNION ALL SELECT 'signing_keys owned by ' || relowner::regrole::text FROM pg_class WHERE oid = 'fencegate.signing_keys'::regclass AND relowner <> $1::text::regrole
UNION ALL SELECT 'default privileges of the owner role' FROM pg_default_acl WHERE defaclnamespace = 'fencegate'::regnamespace AND defaclrole = $1::text::regrole
UNION ALL SELECT 'dependency of ' || pg_describe_object(classid, objid, objsubid) FROM pg_depend WHERE refobjid IN (SELECT oid FROM pg_proc WHERE pronamespace = 'appx'::regnamespace)`

// TestUpgradeRemovesPlanted installs each shipped version, plants objects
// on the marks and in the schema the way the role that owned them could
// (version 1: the application role itself), and checks that status reports
// them before the upgrade, that the upgrade removes every one (restoring
// the default it replaced), that nothing of the application's code is
// attached to fencegate's objects afterwards, and that the fence works.
func TestUpgradeRemovesPlanted(t *testing.T) {
	for _, v := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			ctx := context.Background()
			db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
			other := pgfencetest.Role(t, db.DSN, "fg_other_", "LOGIN")
			app := db.AppConn(t)
			var admin *pgx.Conn
			role := db.Owner
			if v == 1 {
				installV1(t, db, app)
				admin = db.Admin(t)
				role = db.App
			} else {
				admin = installShipped(t, db, v)
				mustExec(t, admin, `GRANT USAGE ON SCHEMA fencegate TO `+db.App+`;
					GRANT EXECUTE ON FUNCTION fencegate.fence(text, bigint), fencegate.fence_many(text[], bigint) TO `+db.App+`;
					GRANT SELECT ON fencegate.marks TO `+db.App)
			}
			r := strings.NewReplacer("{role}", role, "{app}", db.App, "{other}", other)
			mustExec(t, admin, r.Replace(appFunctionsSQL))
			mustExec(t, admin, r.Replace(plantSQL))
			switch v {
			case 1:
				mustExec(t, admin, r.Replace(plantedSigningKeysSQL))
			case 2:
				// A grant of CREATE on the schema let the application in.
				mustExec(t, admin, "GRANT USAGE, CREATE ON SCHEMA fencegate TO "+db.App)
				mustExec(t, admin, r.Replace(plantedSigningKeysSQL))
			case 3:
				mustExec(t, admin, "SET ROLE "+db.Owner+"; ALTER TABLE fencegate.signing_keys ADD CONSTRAINT planted_key_check CHECK (appx.ok(position)); RESET ROLE")
			}
			if err := pgfence.AdminSession(ctx, admin); err != nil {
				t.Fatal(err)
			}

			st, err := pgfence.Inspect(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"planted_check", "planted_idx", "appx.stamp()", "planted_col", "planted_type", "UPDATE to " + other} {
				if !slices.ContainsFunc(st.Problems, func(p string) bool { return strings.Contains(p, want) }) {
					t.Errorf("status before the upgrade does not report %s: %q", want, st.Problems)
				}
			}
			if v == 3 && !slices.ContainsFunc(st.Problems, func(p string) bool { return strings.Contains(p, "planted_key_check") }) {
				t.Errorf("status before the upgrade does not report planted_key_check: %q", st.Problems)
			}

			rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
			if err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			t.Logf("upgrade actions: %q", rep.Actions)
			rows, err := admin.Query(ctx, leftoversSQL, db.Owner)
			if err != nil {
				t.Fatal(err)
			}
			left, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Errorf("after the upgrade from version %d these planted objects remain: %q", v, left)
			}
			if got := health(t, admin); len(got) != 0 {
				t.Errorf("HealthQuery after the upgrade = %q", got)
			}
			if err := script(app, "BEGIN", "SELECT fencegate.fence('planted:1', 1)", "COMMIT"); err != nil {
				t.Fatalf("fence after the upgrade: %v", err)
			}
			rep, err = pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
			if err != nil || len(rep.Actions) != 0 {
				t.Fatalf("second upgrade: %v, actions %q", err, rep.Actions)
			}
		})
	}
}

// TestUpgradeRefusesPlanted: what the upgrade cannot remove without losing
// data or guessing, it refuses, naming it, and changes nothing: a
// signing_keys table the application created before version 3 that holds
// a key, and a column of the marks whose type was changed.
func TestUpgradeRefusesPlanted(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	admin := installShipped(t, db, 2)
	r := strings.NewReplacer("{app}", db.App)
	mustExec(t, admin, r.Replace(appFunctionsSQL))
	mustExec(t, admin, "GRANT USAGE, CREATE ON SCHEMA fencegate TO "+db.App)
	mustExec(t, admin, r.Replace(plantedSigningKeysSQL))
	mustExec(t, admin, "SET ROLE "+db.App+"; INSERT INTO fencegate.signing_keys VALUES ('k', 'c', '\\x00', decode(repeat('00', 64), 'hex'), decode(repeat('00', 64), 'hex'), 1); RESET ROLE")
	version := func() string {
		var body string
		if err := admin.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE oid = 'fencegate.schema_version()'::regprocedure").Scan(&body); err != nil {
			t.Fatal(err)
		}
		return body
	}
	before := version()
	_, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
	if !errors.Is(err, pgfence.ErrUnexpectedObjects) || !strings.Contains(err.Error(), "fencegate.signing_keys") {
		t.Fatalf("upgrade over a planted signing_keys with a key: %v, want ErrUnexpectedObjects naming it", err)
	}
	if got := version(); got != before {
		t.Fatalf("the refused upgrade changed schema_version to %q", got)
	}

	mustExec(t, admin, "DROP TABLE fencegate.signing_keys")
	mustExec(t, admin, "SET ROLE "+db.Owner+"; ALTER TABLE fencegate.marks ALTER COLUMN holder_boot TYPE text; RESET ROLE")
	if got := strings.Join(health(t, admin), "\n"); !strings.Contains(got, "column holder_boot on fencegate.marks (text)") {
		t.Fatalf("HealthQuery with a changed column = %q", got)
	}
	_, err = pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
	if !errors.Is(err, pgfence.ErrUnexpectedObjects) || !strings.Contains(err.Error(), "holder_boot") {
		t.Fatalf("upgrade over a changed column: %v, want ErrUnexpectedObjects naming holder_boot", err)
	}
}

// TestMarkHolders: a session that fenced and has not ended is listed; one that only read the marks is not; once it ends
// nothing is listed. Status warns only when prepared transactions are
// enabled (the test server has max_prepared_transactions = 0, so the
// prepared case itself is not exercised here).
func TestMarkHolders(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	holder := db.AppConn(t)
	reader := db.AppConn(t)
	mustExec(t, holder, "SELECT fencegate.fence('held:1', 3); SELECT fencegate.fence('held:2', 3); SELECT fencegate.fence('held:3', 3)")
	mustExec(t, holder, "BEGIN; SELECT fencegate.fence('held:1', 4); SELECT fencegate.fence('held:2', 4)")
	mustExec(t, reader, "BEGIN; SELECT count(*) FROM fencegate.marks")
	var pid int
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	hs, err := pgfence.MarkHolders(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].PID != pid || hs[0].Prepared || hs[0].Role != db.App ||
		hs[0].State != "idle in transaction" {
		t.Fatalf("MarkHolders = %+v, want the holder (pid %d) alone", hs, pid)
	}
	mustExec(t, holder, "COMMIT")
	mustExec(t, reader, "COMMIT")
	if hs, err := pgfence.MarkHolders(ctx, admin); err != nil || len(hs) != 0 {
		t.Fatalf("MarkHolders after COMMIT = %+v, %v", hs, err)
	}
	var prepared int
	if err := admin.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	st, err := pgfence.Inspect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	warned := slices.ContainsFunc(st.Warnings, func(w string) bool { return strings.Contains(w, "max_prepared_transactions") })
	if warned != (prepared > 0) {
		t.Fatalf("max_prepared_transactions = %d, Inspect warnings = %q", prepared, st.Warnings)
	}
}

// TestUpgradeRefusesUnexpectedRelations: a table the application made in
// schema fencegate (with CREATE on it, as version 1's owner or by a grant)
// is not handed to the owner role, where an expression index on it would
// run the application's code as the owner role under autovacuum: the
// upgrade refuses, naming it, and changes nothing.
func TestUpgradeRefusesUnexpectedRelations(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	mustExec(t, admin, "GRANT CREATE ON SCHEMA fencegate TO "+db.App+"; CREATE SCHEMA appy AUTHORIZATION "+db.App)
	mustExec(t, db.AppConn(t), `CREATE TABLE fencegate.app_made (i int);
		CREATE FUNCTION appy.code(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1';
		CREATE INDEX ON fencegate.app_made (appy.code(i));
		CREATE SEQUENCE fencegate.app_seq`)
	_, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
	if !errors.Is(err, pgfence.ErrUnexpectedObjects) || !strings.Contains(err.Error(), "table fencegate.app_made (owned by "+db.App+")") ||
		!strings.Contains(err.Error(), "sequence fencegate.app_seq") {
		t.Fatalf("upgrade with an application's table in the schema: %v; want ErrUnexpectedObjects naming it and the sequence", err)
	}
	var owner string
	if err := admin.QueryRow(ctx, "SELECT relowner::regrole::text FROM pg_class WHERE oid = 'fencegate.app_made'::regclass").Scan(&owner); err != nil || owner != db.App {
		t.Fatalf("owner of fencegate.app_made after the refused upgrade: %q, %v; want %s", owner, err, db.App)
	}
	mustExec(t, admin, "DROP TABLE fencegate.app_made; DROP SEQUENCE fencegate.app_seq; REVOKE CREATE ON SCHEMA fencegate FROM "+db.App)
	if _, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true}); err != nil {
		t.Fatalf("upgrade once they are gone: %v", err)
	}
}
