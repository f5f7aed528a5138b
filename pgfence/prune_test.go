package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// fakeProof is a well-formed proof; a database without signing keys checks
// only the form.
var fakeProof = "k1." + strings.Repeat("ab", 32)

// fenceAs runs one transaction on conn: the fence statement q with args,
// then COMMIT; it returns the first error (after a ROLLBACK).
func fenceAs(conn *pgx.Conn, q string, args ...any) error {
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// TestPruneFloor prunes at floor 100 and checks what every fence does
// afterwards: at or below the floor refused (FG001, naming the floor) for
// resources whose mark went and for ones that never had one, by all three
// fence functions; above it accepted; kept marks still refuse lower
// tokens; a prune at a lower floor changes nothing; the audit rows of
// pruned resources at or below the floor go, others stay; the plain SQL
// entry point works.
func TestPruneFloor(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for r, tok := range map[string]int64{"order:1": 10, "order:2": 200, "order:3": 100, "order:4": 101} {
		if err := fenceAs(f.app, fencegate.FenceSQL, r, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgfence.SetMark(ctx, f.admin, "note:1", 20, "test"); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.SetMark(ctx, f.admin, "note:2", 500, "test"); err != nil {
		t.Fatal(err)
	}
	var progress []int64
	res, err := pgfence.Prune(ctx, f.admin, 100, pgfence.PruneOptions{Batch: 1, Progress: func(n int64) { progress = append(progress, n) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.FloorBefore != 0 || res.FloorAfter != 100 || res.Deleted != 3 || res.Left != 0 || res.Batches != 3 || len(progress) != 3 {
		t.Fatalf("prune: %+v, progress %v", res, progress)
	}
	if got := marks(t, f.admin); !sameMarks(got, map[string]int64{"order:2": 200, "order:4": 101, "note:2": 500}) {
		t.Fatalf("marks after the prune: %v", got)
	}
	var audit []string
	rows, _ := f.admin.Query(ctx, "SELECT resource FROM fencegate.audit ORDER BY id")
	if audit, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(audit) != 1 || audit[0] != "note:2" {
		t.Fatalf("audit after the prune: %v, %v", audit, err)
	}
	msg := "marks at or below 100 were pruned (floor 100)"
	for _, c := range []struct {
		q    string
		args []any
	}{
		{fencegate.FenceSQL, []any{"order:1", int64(5)}},
		{fencegate.FenceSQL, []any{"order:1", int64(100)}},
		{fencegate.FenceSQL, []any{"order:9", int64(0)}},
		{fencegate.FenceSQL, []any{"order:3", int64(100)}},
		{fencegate.FenceSignedSQL, []any{"order:1", int64(50), fakeProof}},
		{"SELECT fencegate.fence_many($1::text[], $2::bigint)", []any{[]string{"order:7", "order:1"}, int64(99)}},
	} {
		err := fenceAs(f.app, c.q, c.args...)
		wantRefused(t, err, fencegate.CodeStaleToken, msg)
	}
	err = fenceAs(f.app, fencegate.FenceSQL, "order:1", int64(5))
	if want := "fencegate: stale token 5 for resource 'order:1': marks at or below 100 were pruned (floor 100)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("fence below the floor: %v, want %q", err, want)
	}
	// Kept marks refuse lower tokens above the floor as before.
	wantRefused(t, fenceAs(f.app, fencegate.FenceSQL, "order:2", int64(150)), fencegate.CodeStaleToken, "current token is 200")
	// Above the floor: accepted, and the write with it.
	for _, c := range []struct {
		q    string
		args []any
	}{
		{fencegate.FenceSQL, []any{"order:1", int64(101)}},
		{fencegate.FenceSignedSQL, []any{"order:3", int64(101), fakeProof}},
		{"SELECT fencegate.fence_many($1::text[], $2::bigint)", []any{[]string{"order:5", "order:6"}, int64(102)}},
	} {
		if err := fenceAs(f.app, c.q, c.args...); err != nil {
			t.Fatalf("%s %v above the floor: %v", c.q, c.args, err)
		}
	}
	if err := attemptTok(ctx, f.app, "order:1", 101, "UPDATE shop.orders SET state = 'paid' WHERE id = 1"); err != nil {
		t.Fatalf("fenced write above the floor: %v", err)
	}
	// A lower floor changes nothing.
	before := f.marksSnapshot(t)
	res, err = pgfence.Prune(ctx, f.admin, 50, pgfence.PruneOptions{})
	if err != nil || res.FloorBefore != 100 || res.FloorAfter != 100 || res.Deleted != 0 {
		t.Fatalf("prune at a lower floor: %+v, %v", res, err)
	}
	if after := f.marksSnapshot(t); after != before {
		t.Fatalf("prune at a lower floor changed the marks: %s -> %s", before, after)
	}
	// The plain SQL entry point, as psql calls it.
	var n int64
	if err := f.admin.QueryRow(ctx, "SELECT fencegate.prune(101)", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil || n != 3 {
		t.Fatalf("SELECT fencegate.prune(101): %d, %v; want 3 (order:1, order:3, order:4)", n, err)
	}
	if fl, err := pgfence.Floor(ctx, f.admin); err != nil || fl != 101 {
		t.Fatalf("floor: %d, %v", fl, err)
	}
	st, err := pgfence.Inspect(ctx, f.admin)
	if err != nil || st.Floor != 101 || len(st.Problems) != 0 {
		t.Fatalf("status: floor %d, problems %v, %v", st.Floor, st.Problems, err)
	}
	stats, err := pgfence.Stats(ctx, f.admin)
	if err != nil || stats.Floor != 101 || stats.Count != 4 || stats.Bytes <= 0 || stats.Oldest == nil {
		t.Fatalf("stats: %+v, %v", stats, err)
	}
	_, err = pgfence.Prune(ctx, f.admin, -1, pgfence.PruneOptions{})
	if !errors.Is(err, pgfence.ErrBadInput) {
		t.Fatalf("negative floor: %v", err)
	}
	if _, err := f.admin.Exec(ctx, "SELECT fencegate.prune(NULL)"); sqlstate(err) != fencegate.CodeMisuse {
		t.Fatalf("prune(NULL): %v", err)
	}
}

// attemptTok fences resource with token on conn and runs stmt, then
// commits.
func attemptTok(ctx context.Context, conn *pgx.Conn, resource string, token int64, stmt string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, resource, token); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, stmt); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// TestPruneRefusedToApp: the application role can neither prune nor move
// the floor nor delete marks, straight to PostgreSQL or through the gate.
func TestPruneRefusedToApp(t *testing.T) {
	for _, via := range []path{direct, viaProxy} {
		t.Run(string(via), func(t *testing.T) {
			ctx := context.Background()
			f := newFixtureVia(t, via)
			if err := fenceAs(f.app, fencegate.FenceSQL, "order:1", int64(10)); err != nil {
				t.Fatal(err)
			}
			if _, err := pgfence.Prune(ctx, f.admin, 5, pgfence.PruneOptions{}); err != nil {
				t.Fatal(err)
			}
			before := f.marksSnapshot(t)
			for _, q := range []string{
				"SELECT fencegate.prune(1000)",
				"SELECT * FROM fencegate.prune_batch(1000, NULL, 10)",
				"CALL fencegate.prune(1000)",
				"SELECT setval('fencegate.floor', 1000)",
				"SELECT setval('fencegate.floor', 0)",
				"SELECT nextval('fencegate.floor')",
				"ALTER SEQUENCE fencegate.floor RESTART 0",
				"DELETE FROM fencegate.marks",
				"UPDATE fencegate.marks SET token = 0",
				"TRUNCATE fencegate.marks",
				"DROP SEQUENCE fencegate.floor",
				"SELECT last_value FROM fencegate.floor",
			} {
				err := script(f.app, q)
				expectErr(t, q, err, "")
				if c := sqlstate(err); c != "42501" && c != "42809" && c != "42883" {
					t.Fatalf("%s: %v (SQLSTATE %s), want a privilege error", q, err, c)
				}
			}
			res, err := pgfence.Prune(ctx, f.app, 1000, pgfence.PruneOptions{})
			if !errors.Is(err, pgfence.ErrPrivilege) {
				t.Fatalf("Prune as the application role: %+v, %v; want ErrPrivilege", res, err)
			}
			if fl, err := pgfence.Floor(ctx, f.admin); err != nil || fl != 5 {
				t.Fatalf("floor after the attempts: %d, %v; want 5", fl, err)
			}
			if after := f.marksSnapshot(t); after != before {
				t.Fatalf("marks changed: %s -> %s", before, after)
			}
		})
	}
}

// TestPruneFloorHealth: a floor sequence missing, altered, unlogged or
// granted is a problem; the upgrade repairs what it can.
func TestPruneFloorHealth(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	for _, c := range []struct{ alter, want string }{
		{"ALTER SEQUENCE fencegate.floor INCREMENT 2", "sequence fencegate.floor is missing or altered"},
		{"ALTER SEQUENCE fencegate.floor MINVALUE -5", "sequence fencegate.floor is missing or altered"},
		{"ALTER SEQUENCE fencegate.floor CYCLE", "sequence fencegate.floor is missing or altered"},
		{"ALTER SEQUENCE fencegate.floor SET UNLOGGED", "sequence fencegate.floor is missing or altered"},
		{"GRANT UPDATE ON SEQUENCE fencegate.floor TO " + db.App, "UPDATE on fencegate.floor is granted to " + db.App},
		{"GRANT SELECT ON SEQUENCE fencegate.floor TO PUBLIC", "SELECT on fencegate.floor is granted to PUBLIC"},
		{"GRANT EXECUTE ON FUNCTION fencegate.prune(bigint) TO " + db.App, "function fencegate.prune(bigint) is executable by " + db.App},
	} {
		if strings.HasSuffix(c.alter, "SET UNLOGGED") && testutil.PostgresMajor(t) < 15 {
			continue // unlogged sequences are 15's
		}
		mustExec(t, admin, c.alter)
		got := strings.Join(health(t, admin), "\n")
		if !strings.Contains(got, c.want) {
			t.Fatalf("%s: health %q, want %q", c.alter, got, c.want)
		}
		if _, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true}); err != nil {
			t.Fatalf("%s: upgrade: %v", c.alter, err)
		}
		if got := health(t, admin); len(got) != 0 {
			t.Fatalf("%s: health after the upgrade: %v", c.alter, got)
		}
	}
	mustExec(t, admin, "DROP SEQUENCE fencegate.floor")
	if got := strings.Join(health(t, admin), "\n"); !strings.Contains(got, "sequence fencegate.floor is missing or altered") {
		t.Fatalf("dropped floor: health %q", got)
	}
	// A fence without its floor fails rather than accept anything.
	app := db.AppConn(t)
	if err := fenceAs(app, fencegate.FenceSQL, "r", int64(1)); err == nil {
		t.Fatal("fence without the floor accepted")
	}
	if _, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true}); err != nil {
		t.Fatal(err)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("health after the upgrade: %v", got)
	}
}

// TestUpgradeToFloor upgrades versions 1 to 4: every mark kept, the floor
// at 0, a second upgrade a no-op, fences work.
func TestUpgradeToFloor(t *testing.T) {
	for v := 1; v <= 4; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			ctx := context.Background()
			db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
			var admin *pgx.Conn
			want := map[string]int64{"a": 3, "b": 9}
			if v == 1 {
				app := db.AppConn(t)
				installV1(t, db, app)
				admin = db.Admin(t)
				want = v1Marks
			} else {
				admin = installShipped(t, db, v)
				for r, tok := range want {
					mustExec(t, admin, "SET ROLE "+db.Owner+"; SELECT fencegate.fence('"+r+"', "+fmt.Sprint(tok)+"); RESET ROLE")
				}
			}
			rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}, RequireInstalled: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.FromVersion != v || rep.ToVersion != pgfence.SchemaVersion {
				t.Fatalf("report: %+v", rep)
			}
			if got := marks(t, admin); !sameMarks(got, want) {
				t.Fatalf("marks after the upgrade: %v, want %v", got, want)
			}
			if fl, err := pgfence.Floor(ctx, admin); err != nil || fl != 0 {
				t.Fatalf("floor after the upgrade: %d, %v", fl, err)
			}
			if got := health(t, admin); len(got) != 0 {
				t.Fatalf("health: %v", got)
			}
			if rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true}); err != nil || len(rep.Actions) != 0 {
				t.Fatalf("second upgrade: %v, %q", err, rep.Actions)
			}
			app := db.AppConn(t)
			wantRefused(t, fenceAs(app, fencegate.FenceSQL, "b", want["b"]-1), fencegate.CodeStaleToken, fmt.Sprintf("current token is %d", want["b"]))
			if err := fenceAs(app, fencegate.FenceSQL, "b", want["b"]); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPrunePlantedFloor: a floor sequence the application role planted in
// a version 1 schema (which it owned) is dropped, not kept with its value.
func TestPrunePlantedFloor(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	app := db.AppConn(t)
	installV1(t, db, app)
	mustExec(t, app, "CREATE SEQUENCE fencegate.floor AS bigint MINVALUE -100 START -100")
	admin := db.Admin(t)
	rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(rep.Actions, "\n"), "dropped sequence fencegate.floor") {
		t.Fatalf("actions: %q", rep.Actions)
	}
	if fl, err := pgfence.Floor(ctx, admin); err != nil || fl != 0 {
		t.Fatalf("floor: %d, %v", fl, err)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("health: %v", got)
	}
}

// TestPruneSigned: in a database that requires signed tokens the floor
// holds the same way: a validly signed token at or below the floor is
// refused with FG001 (after its proof verified), one above it is accepted;
// a forged proof above the floor is still FG008; the prune keeps the
// signing keys and health stays clean.
func TestPruneSigned(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app := db.AppConn(t)
	admin := db.Admin(t)
	const cluster = "c-prune"
	ts := keyring(t, keyNew)
	requireSigned(t, db, cluster, ts)
	for r, tok := range map[string]int64{"acct:1": 40, "acct:2": 400} {
		if err := fenceAs(app, fencegate.FenceSignedSQL, r, tok, ts.Sign(cluster, r, tok)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := pgfence.Prune(ctx, admin, 100, pgfence.PruneOptions{})
	if err != nil || res.Deleted != 1 || res.FloorAfter != 100 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	wantRefused(t, fenceAs(app, fencegate.FenceSignedSQL, "acct:1", int64(41), ts.Sign(cluster, "acct:1", 41)), fencegate.CodeStaleToken, "marks at or below 100 were pruned (floor 100)")
	wantRefused(t, fenceAs(app, fencegate.FenceSignedSQL, "acct:9", int64(100), ts.Sign(cluster, "acct:9", 100)), fencegate.CodeStaleToken, "(floor 100)")
	wantRefused(t, fenceAs(app, fencegate.FenceSignedSQL, "acct:2", int64(399), ts.Sign(cluster, "acct:2", 399)), fencegate.CodeStaleToken, "current token is 400")
	wantRefused(t, fenceAs(app, fencegate.FenceSignedSQL, "acct:1", int64(101), ts.Sign(cluster, "acct:2", 101)), fencegate.CodeBadProof, "does not verify")
	wantRefused(t, fenceAs(app, fencegate.FenceSignedSQL, "acct:1", int64(50), ts.Sign(cluster, "acct:2", 50)), fencegate.CodeBadProof, "does not verify")
	if err := fenceAs(app, fencegate.FenceSignedSQL, "acct:1", int64(101), ts.Sign(cluster, "acct:1", 101)); err != nil {
		t.Fatalf("signed fence above the floor: %v", err)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("health: %v", got)
	}
	sg, err := pgfence.SigningStatus(ctx, admin)
	if err != nil || sg == nil {
		t.Fatalf("signing status after the prune: %+v, %v", sg, err)
	}
}

// Any role can take the advisory lock that serializes prunes (it delays
// prunes and decides nothing): a prune that gives up waiting for it fails
// with ErrLocked naming the session that holds it, and nothing of it was
// done: the floor and the marks are as they were.
func TestPruneNamesWhoHoldsItsLock(t *testing.T) {
	ctx := context.Background()
	f := newFixtureVia(t, direct)
	if err := fenceAs(f.app, fencegate.FenceSQL, "order:1", int64(10)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.Exec(ctx, "SET application_name = 'the-blocker'"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.app.Exec(ctx, "SELECT pg_advisory_lock('fencegate.floor'::regclass::oid::bigint)"); err != nil {
		t.Fatalf("the application role takes the prune lock: %v", err)
	}
	before := f.marksSnapshot(t)
	_, err := pgfence.Prune(ctx, f.admin, 50, pgfence.PruneOptions{})
	if !errors.Is(err, pgfence.ErrLocked) {
		t.Fatalf("Prune while another session holds its lock: %v; want ErrLocked", err)
	}
	for _, w := range []string{"another session holds the prune lock", f.db.App, "the-blocker", "the floor is as it was"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if fl, err := pgfence.Floor(ctx, f.admin); err != nil || fl != 0 {
		t.Fatalf("floor after the prune gave up: %d, %v; want 0", fl, err)
	}
	if got := f.marksSnapshot(t); got != before {
		t.Fatalf("marks changed by a prune that gave up:\n before %s\n after  %s", before, got)
	}
	if _, err := f.app.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	if res, err := pgfence.Prune(ctx, f.admin, 50, pgfence.PruneOptions{}); err != nil || res.Deleted != 1 {
		t.Fatalf("Prune once the lock is free: %+v, %v; want 1 mark deleted", res, err)
	}
}
