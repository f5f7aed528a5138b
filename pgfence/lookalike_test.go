package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// gateHealth runs HealthQuery the way the gate does: in a read-only
// transaction whose search_path is pinned.
func gateHealth(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog, pg_temp"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, pgfence.HealthQuery)
	if err != nil {
		t.Fatalf("HealthQuery: %v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("HealthQuery: %v", err)
	}
	return out
}

// TestLookalikesByName: fencegate finds protected tables by the function
// their triggers call, not by the triggers' names. An application role with
// only TEMP (and its own schema) plants tables that look protected by name:
// a temporary table with triggers named like fencegate's that call a
// built-in function, one whose triggers call a function of its own named
// like fencegate's check functions, and a permanent table of its own with a
// fencegate_resource column and such triggers; and default privileges of
// its own in schema fencegate (which any role may set, and which only act on
// objects it creates there, which it cannot). None of them makes the
// database unsound (the gate would refuse every session), none is listed as
// protected, and Install, which would try to "repair" them (and fail on
// another session's temporary table), ignores them.
func TestLookalikesByName(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	plant := f.appConn(t) // keeps its temporary tables while the test runs
	mustExec(t, plant, `
		CREATE FUNCTION app.check_insert() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
		CREATE FUNCTION app.fencegate_ins() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
		CREATE TEMP TABLE look1 (id int);
		CREATE TRIGGER fencegate_ins AFTER INSERT ON look1 FOR EACH STATEMENT EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger();
		CREATE TEMP TABLE look2 (id int, fencegate_resource text COLLATE "C" GENERATED ALWAYS AS ('x:' || id) STORED);
		CREATE TRIGGER fencegate_ins AFTER INSERT ON look2 REFERENCING NEW TABLE AS fg_new FOR EACH STATEMENT EXECUTE FUNCTION app.check_insert();
		CREATE TRIGGER fencegate_row AFTER INSERT OR UPDATE OR DELETE ON look2 FOR EACH ROW EXECUTE FUNCTION app.fencegate_ins();
		CREATE TRIGGER fencegate_replica AFTER INSERT OR UPDATE OR DELETE ON look2 FOR EACH ROW EXECUTE FUNCTION app.fencegate_ins();
		CREATE TABLE app.look3 (id int, fencegate_resource text COLLATE "C" GENERATED ALWAYS AS ('x:' || id) STORED);
		CREATE TRIGGER fencegate_ins AFTER INSERT ON app.look3 REFERENCING NEW TABLE AS fg_new FOR EACH STATEMENT EXECUTE FUNCTION app.check_insert();
		CREATE TRIGGER fencegate_row AFTER INSERT OR UPDATE OR DELETE ON app.look3 FOR EACH ROW EXECUTE FUNCTION app.fencegate_ins();
		CREATE TEMP TABLE look4 () INHERITS (app.look3);
		ALTER DEFAULT PRIVILEGES IN SCHEMA fencegate GRANT ALL ON TABLES TO PUBLIC`)

	if got := gateHealth(t, f.admin); len(got) != 0 {
		t.Fatalf("HealthQuery with look-alikes = %q, want nothing", got)
	}
	if got := health(t, f.app); len(got) != 0 {
		t.Fatalf("HealthQuery as the application role with look-alikes = %q, want nothing", got)
	}
	st, err := pgfence.Inspect(ctx, f.admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Problems) != 0 {
		t.Fatalf("Inspect problems with look-alikes = %q", st.Problems)
	}
	for _, tb := range st.Tables {
		if strings.Contains(tb.Table, "look") {
			t.Fatalf("Inspect lists look-alike %s as protected: %+v", tb.Table, st.Tables)
		}
	}
	var listed []string
	rows, err := f.admin.Query(ctx, "SELECT tbl::text FROM fencegate.protected")
	if err != nil {
		t.Fatal(err)
	}
	if listed, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(listed, func(s string) bool { return strings.Contains(s, "look") }) {
		t.Fatalf("fencegate.protected lists look-alikes: %q", listed)
	}
	rep, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner})
	if err != nil {
		t.Fatalf("Install with look-alikes: %v", err)
	}
	if len(rep.Actions) != 0 {
		t.Fatalf("Install with look-alikes acted: %q", rep.Actions)
	}
	// The look-alikes belong to the application role, which can log in:
	// warned about as protected tables if found by their triggers' names.
	if slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "look") }) {
		t.Fatalf("Install warns about look-alikes as protected tables: %q", rep.Warnings)
	}
	// The real protected tables are still found and checked.
	if err := attempt(ctx, f.app, []string{"order:2"}, []string{"UPDATE shop.orders SET state = 'x' WHERE id = 1"}, false); err == nil {
		t.Fatal("unfenced write accepted after the look-alikes")
	} else {
		wantRefused(t, err, fencegate.CodeUnfenced)
	}
	mustExec(t, f.admin, "DROP TRIGGER fencegate_upd ON shop.orders")
	if got := gateHealth(t, f.admin); len(got) != 1 || !strings.Contains(got[0], "shop.orders has no working fencegate check (fencegate_upd") {
		t.Fatalf("HealthQuery with a real check dropped = %q", got)
	}
}

// TestFenceResourceTooLong: the fence refuses a resource name longer than
// the token service ever takes (1024 bytes of UTF-8) with FG003, in all
// three fence functions, before anything is locked or advanced; 1024 bytes
// are accepted.
func TestFenceResourceTooLong(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app := db.AppConn(t)
	long := strings.Repeat("é", 512) + "x" // 1025 bytes of UTF-8, 513 characters
	for _, q := range []string{
		"SELECT fencegate.fence($1::text, 1::bigint)",
		"SELECT fencegate.fence($1::text, 1::bigint, 'k.' || repeat('0', 64))",
		"SELECT fencegate.fence_many(ARRAY['ok', $1::text], 1::bigint)",
	} {
		_, err := app.Exec(ctx, q, long)
		expectErr(t, q, err, fencegate.CodeMisuse)
		if !strings.Contains(err.Error(), "1024 bytes") {
			t.Fatalf("%s: %v, want the limit named", q, err)
		}
	}
	if _, err := app.Exec(ctx, "SELECT fencegate.fence($1::text, 1::bigint)", strings.Repeat("é", 512)); err != nil {
		t.Fatalf("fence with a 1024-byte resource: %v", err)
	}
	var n int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM fencegate.marks").Scan(&n); err != nil || n != 1 {
		t.Fatalf("marks after the refused fences: %d, %v; want only the 1024-byte one", n, err)
	}
}

// TestLockHoldersByIdentity: when a repair gives up on a lock, its error
// names the sessions holding locks on fencegate's tables and on protected
// tables, found by identity: a session that holds a lock on a table of its
// own whose trigger is merely named fencegate_ins is not named.
func TestLockHoldersByIdentity(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	db.Exec(t, "CREATE SCHEMA app AUTHORIZATION "+db.App)
	bystander := appConnNamed(t, db, "fg-holds-a-lookalike")
	mustExec(t, bystander, `
		CREATE FUNCTION app.check_insert() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
		CREATE TABLE app.look (id int);
		CREATE TRIGGER fencegate_ins AFTER INSERT ON app.look FOR EACH STATEMENT EXECUTE FUNCTION app.check_insert()`)
	holder := appConnNamed(t, db, "fg-holds-the-marks")
	var holderPID, bystanderPID int32
	for _, c := range []struct {
		conn *pgx.Conn
		pid  *int32
		lock string
	}{{bystander, &bystanderPID, "LOCK TABLE app.look IN ACCESS SHARE MODE"}, {holder, &holderPID, "SELECT count(*) FROM fencegate.marks"}} {
		if err := c.conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(c.pid); err != nil {
			t.Fatal(err)
		}
		tx, err := c.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck // ends the test's transaction
		if _, err := tx.Exec(ctx, c.lock); err != nil {
			t.Fatalf("%s: %v", c.lock, err)
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 20*pgfence.RepairLockTimeout)
	defer cancel()
	_, err := pgfence.Install(ictx, db.Admin(t), pgfence.InstallOptions{})
	if !errors.Is(err, pgfence.ErrLocked) {
		t.Fatalf("install behind an open transaction that read the marks: %v; want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", holderPID)) {
		t.Errorf("error %q does not name the holder of the marks (pid %d)", err, holderPID)
	}
	if strings.Contains(err.Error(), fmt.Sprintf("pid %d", bystanderPID)) || strings.Contains(err.Error(), "app.look") {
		t.Errorf("error %q names the session that locked only a look-alike (pid %d)", err, bystanderPID)
	}
}
