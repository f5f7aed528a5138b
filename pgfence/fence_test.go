package pgfence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

func TestFenceTokens(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app := db.AppConn(t)
	for _, c := range []struct {
		tok  int64
		code string
	}{{5, ""}, {5, ""}, {7, ""}, {6, fencegate.CodeStaleToken}, {0, fencegate.CodeStaleToken}, {7, ""}, {1 << 62, ""}} {
		var got int64
		err := app.QueryRow(ctx, fencegate.FenceSQL, "acct:1", c.tok).Scan(&got)
		if c.code == "" {
			if err != nil || got != c.tok {
				t.Fatalf("fence(acct:1, %d) = %d, %v", c.tok, got, err)
			}
			continue
		}
		expectErr(t, "stale fence", err, c.code)
		for _, want := range []string{"'acct:1'", "stale token " + itoa(c.tok), "current token is 7"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("stale fence error %q does not say %q", err, want)
			}
		}
	}
	// Resources compare byte for byte.
	for _, r := range []string{"ACCT:1", "acct:1 ", "ａcct:1"} {
		if _, err := app.Exec(ctx, fencegate.FenceSQL, r, int64(1)); err != nil {
			t.Fatalf("fence(%q, 1) collides with acct:1: %v", r, err)
		}
	}
}

// TestFenceSerializes: a second fence on a resource waits for the first
// transaction and then sees its token.
func TestFenceSerializes(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	a, b := db.AppConn(t), db.AppConn(t)
	txA, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txA.Exec(ctx, fencegate.FenceSQL, "r", int64(10)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, fencegate.FenceSQL, "r", int64(9))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the second fence did not wait: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "the waiting older fence", <-done, fencegate.CodeStaleToken)
}

// TestFenceTimeout: a fence waiting behind a stalled holder gives up after
// the database's fencegate.fence_timeout with the retryable FG004.
func TestFenceTimeout(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	db.Exec(t, "ALTER DATABASE "+dbName(t, db.DSN)+" SET fencegate.fence_timeout = '300ms'")
	holder := db.AppConn(t)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "stalled", int64(1)); err != nil {
		t.Fatal(err)
	}
	waiter := db.AppConn(t)
	for _, q := range []struct {
		sql  string
		args []any
	}{{fencegate.FenceSQL, []any{"stalled", int64(2)}}, {fencegate.FenceManySQL, []any{[]string{"a", "stalled"}, int64(2)}}} {
		start := time.Now()
		_, err := waiter.Exec(ctx, q.sql, q.args...)
		expectErr(t, q.sql, err, fencegate.CodeFenceTimeout)
		if !strings.Contains(err.Error(), "300ms") {
			t.Fatalf("timeout error %q does not say how long it waited", err)
		}
		t.Logf("%s gave up after %v", q.sql, time.Since(start).Round(time.Millisecond))
	}
	// The fence's timeout does not leak into the session.
	var lt string
	if err := waiter.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt); err != nil || lt != "0" {
		t.Fatalf("lock_timeout after a fence = %q, %v", lt, err)
	}
	st, err := pgfence.Inspect(ctx, db.Admin(t))
	if err != nil || st.FenceTimeout != "300ms" {
		t.Fatalf("Inspect FenceTimeout = %q, %v", st.FenceTimeout, err)
	}
}

// TestFenceMany: one statement fences a set of resources, in one order, so
// two bulk writers with the same resources in opposite orders never deadlock.
func TestFenceMany(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app := db.AppConn(t)
	var got int64
	if err := app.QueryRow(ctx, fencegate.FenceManySQL, []string{"b", "a", "b", "c"}, int64(4)).Scan(&got); err != nil || got != 4 {
		t.Fatalf("fence_many = %d, %v", got, err)
	}
	marks, err := pgfence.Marks(ctx, app)
	if err != nil || len(marks) != 3 {
		t.Fatalf("marks = %+v, %v", marks, err)
	}
	if err := pgfence.SetMark(ctx, db.Admin(t), "b", 9, "test"); err != nil {
		t.Fatal(err)
	}
	_, err = app.Exec(ctx, fencegate.FenceManySQL, []string{"c", "b", "a"}, int64(5))
	expectErr(t, "stale fence_many", err, fencegate.CodeStaleToken)
	if !strings.Contains(err.Error(), "'b'") || !strings.Contains(err.Error(), "current token is 9") {
		t.Fatalf("stale fence_many error %q does not name b and 9", err)
	}

	// Opposite orders, many rounds, two sessions: no deadlock (40P01).
	resources := make([]string, 50)
	for i := range resources {
		resources[i] = "bulk:" + itoa(int64(i))
	}
	reversed := make([]string, len(resources))
	for i, r := range resources {
		reversed[len(resources)-1-i] = r
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w, list := range [][]string{resources, reversed} {
		conn := db.AppConn(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := int64(0); round < 30; round++ {
				tx, err := conn.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				_, err = tx.Exec(ctx, fencegate.FenceManySQL, list, 100+round*2+int64(w))
				if err != nil && !errors.Is(err, context.Canceled) && sqlstate(err) != fencegate.CodeStaleToken {
					tx.Rollback(ctx) //nolint:errcheck
					errs <- err
					return
				}
				tx.Commit(ctx) //nolint:errcheck
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("bulk fences in opposite orders: %v", err)
	}
}

// TestSetMark: the only way a mark goes down, recorded in the audit; the
// application role cannot call it.
func TestSetMark(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app, admin := db.AppConn(t), db.Admin(t)
	if _, err := app.Exec(ctx, fencegate.FenceSQL, "m", int64(50)); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.SetMark(ctx, app, "m", 1, "attack"); !errors.Is(err, pgfence.ErrPrivilege) {
		t.Fatalf("SetMark as the application role: %v, want ErrPrivilege", err)
	}
	if err := pgfence.SetMark(ctx, admin, "m", 3, "restored from backup"); err != nil {
		t.Fatal(err)
	}
	if err := pgfence.SetMark(ctx, admin, "new", 8, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, fencegate.FenceSQL, "m", int64(3)); err != nil {
		t.Fatalf("fence at the lowered mark: %v", err)
	}
	for _, bad := range []struct {
		r   string
		tok int64
	}{{"", 1}, {"m", -1}} {
		if err := pgfence.SetMark(ctx, admin, bad.r, bad.tok, ""); !errors.Is(err, pgfence.ErrBadInput) {
			t.Fatalf("SetMark(%q, %d): %v, want ErrBadInput", bad.r, bad.tok, err)
		}
	}
	audit, err := pgfence.Audit(ctx, admin, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 2 {
		t.Fatalf("audit = %+v", audit)
	}
	a := audit[0]
	if a.Resource != "m" || a.OldToken == nil || *a.OldToken != 50 || a.NewToken != 3 || a.Reason != "restored from backup" || a.SessionRole != "postgres" || a.At.IsZero() {
		t.Fatalf("audit entry = %+v", a)
	}
	if audit[1].OldToken != nil || audit[1].Resource != "new" {
		t.Fatalf("audit entry for a new mark = %+v", audit[1])
	}
	_, err = app.Exec(ctx, "SELECT * FROM fencegate.audit")
	expectErr(t, "application role reading the audit", err, "42501")
}
