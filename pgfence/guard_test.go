package pgfence_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// TestGuardDDL: with the DDL guard, the owner of a protected table who is
// not a member of the owner role can change nothing about it or the types
// of its columns; a member of the owner role can, and partitions and
// children it creates get their checks at once.
func TestGuardDDL(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t, pgfencetest.Options{GuardDDL: true})
	if !db.Report.GuardDDL {
		t.Fatalf("report: %+v", db.Report)
	}
	owner := pgfencetest.Role(t, db.DSN, "fg_tabown_", "LOGIN")
	admin := db.Admin(t)
	mustExec(t, admin, `CREATE SCHEMA acc AUTHORIZATION `+owner+`;
		SET ROLE `+owner+`;
		CREATE TYPE acc.kind AS ENUM ('debit', 'credit');
		CREATE TABLE acc.entries (id int, account int, kind acc.kind, amount numeric) PARTITION BY RANGE (account);
		CREATE TABLE acc.entries_0 PARTITION OF acc.entries FOR VALUES FROM (0) TO (100);
		CREATE TABLE acc.book (id int, account int);
		CREATE TABLE acc.book_old () INHERITS (acc.book);
		CREATE TABLE acc.scratch (id int);
		RESET ROLE;
		SELECT fencegate.protect('acc.entries', $$'acct:' || account$$);
		SELECT fencegate.protect('acc.book', $$'acct:' || account$$)`)
	tabOwner := pgfencetest.Connect(t, pgfencetest.WithUser(t, db.DSN, owner))
	for _, q := range []string{
		"ALTER TABLE acc.entries DISABLE TRIGGER fencegate_upd",
		"ALTER TABLE acc.entries_0 DISABLE TRIGGER ALL",
		"ALTER TABLE acc.book ENABLE TRIGGER fencegate_ins",
		"DROP TRIGGER fencegate_upd ON acc.book",
		"ALTER TABLE acc.book DROP COLUMN fencegate_resource CASCADE",
		"ALTER TABLE acc.book ADD COLUMN note text",
		"ALTER TABLE acc.book ALTER COLUMN id TYPE bigint USING 0",
		"ALTER TABLE acc.book RENAME TO ledger",
		"ALTER TABLE acc.book_old NO INHERIT acc.book",
		"CREATE RULE r AS ON UPDATE TO acc.book DO INSTEAD NOTHING",
		"CREATE TRIGGER mine BEFORE UPDATE ON acc.book FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()",
		"CREATE TABLE acc.entries_1 PARTITION OF acc.entries FOR VALUES FROM (100) TO (200)",
		"ALTER TABLE acc.entries DETACH PARTITION acc.entries_0",
		"CREATE TABLE acc.book_new () INHERITS (acc.book)",
		"ALTER TYPE acc.kind RENAME VALUE 'debit' TO 'credit2'",
		"ALTER TYPE acc.kind ADD VALUE 'void'",
		"DROP TABLE acc.book CASCADE",
		"DROP TABLE acc.entries_0",
		"DROP TYPE acc.kind CASCADE",
		"ALTER TABLE acc.book SET (fillfactor = 50)",
	} {
		_, err := tabOwner.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
		expectErr(t, q, err, fencegate.CodeProtectedDDL)
	}
	// What is not protected stays the owner's.
	mustExec(t, tabOwner, "ALTER TABLE acc.scratch ADD COLUMN note text; DROP TABLE acc.scratch")
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery after refused DDL = %q", got)
	}

	// A member of the owner role changes protected tables; new partitions
	// and children get their checks.
	member := pgfencetest.Role(t, db.DSN, "fg_dba_", "LOGIN")
	mustExec(t, admin, "GRANT "+db.Owner+", "+owner+" TO "+member)
	dba := pgfencetest.Connect(t, pgfencetest.WithUser(t, db.DSN, member))
	mustExec(t, dba, `CREATE TABLE acc.entries_1 PARTITION OF acc.entries FOR VALUES FROM (100) TO (200);
		CREATE TABLE acc.entries_2 (LIKE acc.entries INCLUDING GENERATED);
		ALTER TABLE acc.entries ATTACH PARTITION acc.entries_2 FOR VALUES FROM (200) TO (300);
		CREATE TABLE acc.book_new () INHERITS (acc.book);
		ALTER TABLE acc.book ADD COLUMN note text`)
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery after a member's DDL = %q", got)
	}
	for _, tbl := range []string{"acc.entries_1", "acc.entries_2", "acc.book_new"} {
		if s := shapeOf(t, admin, tbl); !strings.Contains(s, "fencegate_ins:A") || !strings.Contains(s, "fencegate_trunc:A") {
			t.Fatalf("%s after the guard adopted it: %s", tbl, s)
		}
	}
	st, err := pgfence.Inspect(ctx, admin)
	if err != nil || !st.GuardDDL {
		t.Fatalf("Inspect: %+v %v", st, err)
	}
	// Setting the guard's own flag does not switch the refusals off.
	_, err = tabOwner.Exec(ctx, "SET fencegate.guard_shaping = 'on'; ALTER TABLE acc.book DISABLE TRIGGER ALL", pgx.QueryExecModeSimpleProtocol)
	expectErr(t, "DDL with the guard's flag set", err, fencegate.CodeProtectedDDL)

	// The owner role cannot replace the guard's code, which runs for every
	// DDL command of every role.
	_, err = admin.Exec(ctx, "SET ROLE "+db.Owner+"; CREATE OR REPLACE FUNCTION fencegate.guard_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$BEGIN END$$", pgx.QueryExecModeSimpleProtocol)
	expectErr(t, "the owner role replacing the guard", err, "42501")
	mustExec(t, admin, "RESET ROLE")

	// A disabled guard is a problem that names its repair.
	mustExec(t, admin, "ALTER EVENT TRIGGER fencegate_guard_ddl DISABLE")
	if got := health(t, admin); len(got) != 1 || !strings.Contains(got[0], "--guard-ddl") {
		t.Fatalf("HealthQuery with the guard disabled = %q", got)
	}
	if _, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner}); err != nil {
		t.Fatal(err)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery after the repair = %q", got)
	}
}
