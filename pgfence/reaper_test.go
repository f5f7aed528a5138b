package pgfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// fenceIn begins a transaction on c and fences resource with token in it.
func fenceIn(t *testing.T, c *pgx.Conn, resource string, token int64) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, resource, token); err != nil {
		t.Fatal(err)
	}
	return tx
}

// reapUntil runs passes of r on conn until one ends a session, and returns
// what it ended.
func reapUntil(t *testing.T, r *pgfence.Reaper, conn *pgx.Conn) []pgfence.Reaped {
	t.Helper()
	var reaped []pgfence.Reaped
	testutil.WaitFor(t, 30*time.Second, "the reaper to end a stalled holder", func() error {
		got, err := r.Pass(context.Background(), conn)
		if err != nil {
			t.Fatalf("reaper pass: %v", err)
		}
		reaped = append(reaped, got...)
		if len(reaped) == 0 {
			return errors.New("nothing reaped yet")
		}
		return nil
	})
	return reaped
}

// stalledHolder opens a session of the application role that switches
// PostgreSQL's own idle_in_transaction_session_timeout off, fences
// resource and stays idle in that transaction.
func stalledHolder(t *testing.T, db *pgfencetest.DB, resource string) *pgx.Conn {
	t.Helper()
	c := db.AppConn(t)
	if _, err := c.Exec(context.Background(), "SET idle_in_transaction_session_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	fenceIn(t, c, resource, 10)
	return c
}

// fencesAtOnce fails unless a new session fences resource within 5 s.
func fencesAtOnce(t *testing.T, db *pgfencetest.DB, resource string, token int64) {
	t.Helper()
	ctx := context.Background()
	next := db.AppConn(t)
	if _, err := next.Exec(ctx, "SET lock_timeout = '5s'"); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, next, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fencegate.FenceSQL, resource, token)
		return err
	}); err != nil {
		t.Fatalf("fence on %s after the reaper ended its stalled holder: %v", resource, err)
	}
}

// TestReaperEndsStalledHolders: straight to PostgreSQL a session may SET
// idle_in_transaction_session_timeout = 0 and then sit idle in a
// transaction that holds a fence, its row lock kept until someone acts. A
// reaper whose role holds pg_signal_backend and nothing more (it sees
// neither the session's state nor its statements) ends it once it has
// held the fence for the limit; the fence's lock goes with it, and the
// next holder fences at once. A session idle outside a transaction and one
// idle in a transaction without a fence stay.
func TestReaperEndsStalledHolders(t *testing.T) {
	db := pgfencetest.New(t)
	ctx := context.Background()
	reaperRole := pgfencetest.Role(t, db.DSN, "fg_reaper_", "LOGIN")
	db.Exec(t, "GRANT pg_signal_backend TO "+reaperRole)
	reaperConn := pgfencetest.Connect(t, pgfencetest.WithUser(t, db.DSN, reaperRole))

	stalled := stalledHolder(t, db, "order:1")
	idle := db.AppConn(t) // idle outside a transaction
	unfenced := db.AppConn(t)
	if _, err := unfenced.Exec(ctx, "BEGIN; SELECT 1"); err != nil {
		t.Fatal(err)
	}
	r := &pgfence.Reaper{Limit: 500 * time.Millisecond}
	reaped := reapUntil(t, r, reaperConn)
	if len(reaped) != 1 || reaped[0].PID != int(stalled.PgConn().PID()) || reaped[0].Role != db.App || reaped[0].For < r.Limit || reaped[0].Idle {
		t.Fatalf("reaped %+v; want only the stalled holder, pid %d, role %s, held at least %s (its state unseen)", reaped, stalled.PgConn().PID(), db.App, r.Limit)
	}
	fencesAtOnce(t, db, "order:1", 11)
	var one int
	if err := stalled.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
		t.Fatal("the stalled holder's session still answers")
	}
	if err := idle.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("a session idle outside a transaction: %v", err)
	}
	if err := unfenced.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("a session idle in a transaction without a fence: %v", err)
	}
}

// TestReaperSeeingStatesEndsOnlyIdleHolders: a reaper that may see
// sessions' states (here a superuser's) ends a holder idle in its
// transaction past the limit, and leaves one whose transaction is running
// a statement past it.
func TestReaperSeeingStatesEndsOnlyIdleHolders(t *testing.T) {
	db := pgfencetest.New(t)
	ctx := context.Background()
	stalled := stalledHolder(t, db, "order:1")
	busy := db.AppConn(t)
	busyTx := fenceIn(t, busy, "order:2", 10)
	busyDone := make(chan error, 1)
	go func() {
		_, err := busyTx.Exec(ctx, "SELECT pg_sleep(2)")
		if err == nil {
			err = busyTx.Commit(ctx)
		}
		busyDone <- err
	}()
	r := &pgfence.Reaper{Limit: 300 * time.Millisecond}
	reaped := reapUntil(t, r, db.Admin(t))
	if len(reaped) != 1 || reaped[0].PID != int(stalled.PgConn().PID()) || !reaped[0].Idle || reaped[0].For < r.Limit {
		t.Fatalf("reaped %+v; want only the stalled holder, pid %d, idle at least %s", reaped, stalled.PgConn().PID(), r.Limit)
	}
	for range 3 { // passes while the busy holder runs past the limit
		time.Sleep(r.Limit)
		if got, err := r.Pass(ctx, db.Admin(t)); err != nil || len(got) != 0 {
			t.Fatalf("pass while a holder runs a statement: %+v, %v", got, err)
		}
	}
	if err := <-busyDone; err != nil {
		t.Errorf("a holder running a statement past the limit: %v", err)
	}
	fencesAtOnce(t, db, "order:1", 11)
}

// The reaper's role needs pg_signal_backend: without it a pass says so
// rather than ending nothing in silence.
func TestReaperWithoutSignalRole(t *testing.T) {
	db := pgfencetest.New(t)
	ctx := context.Background()
	stalledHolder(t, db, "order:1")
	weak := pgfencetest.Role(t, db.DSN, "fg_noreap_", "LOGIN")
	conn := pgfencetest.Connect(t, pgfencetest.WithUser(t, db.DSN, weak))
	r := &pgfence.Reaper{Limit: 100 * time.Millisecond}
	var err2 error
	testutil.WaitFor(t, 30*time.Second, "a pass to try to end the holder", func() error {
		_, err2 = r.Pass(ctx, conn)
		if err2 == nil {
			return errors.New("no error yet")
		}
		return nil
	})
	t.Logf("without pg_signal_backend: %v", err2)
}
