package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// health runs HealthQuery the way the proxy does (simple protocol) and
// returns its rows.
func health(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), pgfence.HealthQuery, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("HealthQuery: %v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("HealthQuery: %v", err)
	}
	return out
}

func TestInstallFresh(t *testing.T) {
	db := pgfencetest.New(t)
	rep := db.Report
	if rep.FromVersion != 0 || rep.ToVersion != pgfence.SchemaVersion || rep.OwnerRole != db.Owner {
		t.Fatalf("report = %+v", rep)
	}
	if !slices.Contains(rep.AppRoles, db.App) {
		t.Fatalf("AppRoles = %v, want %s in it", rep.AppRoles, db.App)
	}
	admin := db.Admin(t)
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery after install = %q, want no rows", got)
	}
	if got := health(t, db.AppConn(t)); len(got) != 0 {
		t.Fatalf("HealthQuery as the application role = %q, want no rows", got)
	}
	// Idempotent: a second install changes nothing.
	rep2, err := pgfence.Install(context.Background(), admin, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep2.Actions) != 0 || rep2.FromVersion != pgfence.SchemaVersion {
		t.Fatalf("second install: FromVersion=%d actions=%q, want %d and none", rep2.FromVersion, rep2.Actions, pgfence.SchemaVersion)
	}
	st, err := pgfence.Inspect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Installed || st.Version != pgfence.SchemaVersion || st.OwnerRole != db.Owner || len(st.Problems) != 0 {
		t.Fatalf("Inspect = %+v", st)
	}
}

func TestHealthQueryWithoutSchema(t *testing.T) {
	dsn := testutil.PostgresDB(t)
	conn := pgfencetest.Connect(t, dsn)
	got := health(t, conn)
	if len(got) != 1 || !strings.Contains(got[0], "not installed") || !strings.Contains(got[0], "fencegate schema install") {
		t.Fatalf("HealthQuery on an empty database = %q", got)
	}
	st, err := pgfence.Inspect(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	if st.Installed || st.Version != 0 {
		t.Fatalf("Inspect = %+v", st)
	}
	_, err = pgfence.Install(context.Background(), conn, pgfence.InstallOptions{OwnerRole: "fg_owner_unused", RequireInstalled: true})
	if !errors.Is(err, pgfence.ErrNotInstalled) {
		t.Fatalf("upgrade of an empty database: %v, want ErrNotInstalled", err)
	}
}

// TestInstallKeepsOwner: without an owner role named, Install keeps the
// schema's current one.
func TestInstallKeepsOwner(t *testing.T) {
	db := pgfencetest.New(t)
	rep, err := pgfence.Install(context.Background(), db.Admin(t), pgfence.InstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OwnerRole != db.Owner || len(rep.Actions) != 0 {
		t.Fatalf("Install without an owner: owner %s, actions %q; want %s and none", rep.OwnerRole, rep.Actions, db.Owner)
	}
}

// appConnNamed connects as db.App with an application_name.
func appConnNamed(t *testing.T, db *pgfencetest.DB, name string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = name
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// A repair needs ACCESS EXCLUSIVE on the marks. An application that keeps
// a transaction open after reading them would make that request wait in
// the lock queue, and every fence queued behind it, for as long as it
// likes. The repair gives up after RepairLockTimeout instead, and its
// error names the session that held the lock; once that session ends, the
// repair goes through.
func TestRepairGivesUpOnLocksAndNamesTheHolder(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	holder := appConnNamed(t, db, "fg-holds-the-marks")
	var pid int32
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM fencegate.marks"); err != nil {
		t.Fatal(err)
	}
	// Bounded so that a repair that waits in the queue fails the test
	// rather than hangs it.
	ictx, cancel := context.WithTimeout(ctx, 20*pgfence.RepairLockTimeout)
	defer cancel()
	_, err = pgfence.Install(ictx, db.Admin(t), pgfence.InstallOptions{})
	if !errors.Is(err, pgfence.ErrLocked) {
		t.Fatalf("install behind an open transaction that read the marks: %v; want ErrLocked", err)
	}
	t.Logf("install gave up: %v", err)
	for _, want := range []string{fmt.Sprintf("pid %d", pid), db.App, "fg-holds-the-marks", "AccessShareLock on fencegate.marks", "idle in transaction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	// A fence does not wait for anything meanwhile.
	fenced := appConnNamed(t, db, "fg-fences")
	if err := pgx.BeginFunc(ctx, fenced, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '1s'; SELECT fencegate.fence('r', 1)")
		return err
	}); err != nil {
		t.Fatalf("fence after the repair gave up: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pgfence.Install(ictx, db.Admin(t), pgfence.InstallOptions{}); err != nil {
		t.Fatalf("install once the transaction ended: %v", err)
	}
}

// The installers' lock cannot be held by an application: the advisory lock
// it used to be is free for any role to take, and the lock on the marks
// that replaced it needs a privilege only the owner role has.
func TestApplicationCannotHoldTheInstallersLock(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app := db.AppConn(t)
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// The key of the former installers' lock: "fencegat" in ASCII.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7378424937698517364)"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT s; LOCK TABLE fencegate.marks IN SHARE UPDATE EXCLUSIVE MODE"); sqlstate(err) != "42501" {
		t.Errorf("the application role locking the marks as installers do: %v; want permission denied (42501)", err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
		t.Fatal(err)
	}
	ictx, cancel := context.WithTimeout(ctx, 20*pgfence.RepairLockTimeout)
	defer cancel()
	if _, err := pgfence.Install(ictx, db.Admin(t), pgfence.InstallOptions{}); err != nil {
		t.Fatalf("install while the application holds the former advisory lock: %v", err)
	}
}

// Two first installs at once: there is no table to lock yet, so both create
// schema fencegate; one succeeds and the other fails, saying to run it
// again (or, when the first takes longer than RepairLockTimeout, naming the
// wait), and then succeeds.
func TestConcurrentFirstInstalls(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	conns := []*pgx.Conn{db.Admin(t), db.Admin(t)}
	errs := make(chan error, len(conns))
	for _, c := range conns {
		go func() {
			_, err := pgfence.Install(ctx, c, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}})
			errs <- err
		}()
	}
	failed := 0
	for range conns {
		if err := <-errs; err != nil {
			failed++
			t.Logf("the losing install: %v", err)
			if !errors.Is(err, pgfence.ErrLocked) && !strings.Contains(err.Error(), "run this one again") {
				t.Errorf("the losing install: %v; want a message that says to run it again", err)
			}
		}
	}
	if failed == len(conns) {
		t.Fatal("both first installs failed")
	}
	rep, err := pgfence.Install(ctx, conns[0], pgfence.InstallOptions{RequireInstalled: true})
	if err != nil {
		t.Fatalf("install again: %v", err)
	}
	if len(rep.Actions) > 0 {
		t.Errorf("install after the race changed %q; want nothing to do", rep.Actions)
	}
}
