package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

// TestReapCommand: 'fencegate reap --once', as a role holding
// pg_signal_backend and nothing more, ends a session that set
// idle_in_transaction_session_timeout = 0 and holds a fence, printing one
// line naming it; without --after it is a usage error.
func TestReapCommand(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	reaper := pgfencetest.Role(t, db.DSN, "fg_reaper_", "LOGIN")
	db.Exec(t, "GRANT pg_signal_backend TO "+reaper)
	holder := db.AppConn(t)
	if _, err := holder.Exec(ctx, "SET idle_in_transaction_session_timeout = 0; BEGIN; SELECT fencegate.fence('held:1', 4)"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"reap", "--db", pgfencetest.WithUser(t, db.DSN, reaper), "--after", "300ms", "--once"}, &stdout, &stderr)
	want := fmt.Sprintf("ended session %d (user %s, ", holder.PgConn().PID(), db.App)
	if code != 0 || !strings.Contains(stdout.String(), want) || strings.Count(stdout.String(), "\n") != 1 {
		t.Fatalf("reap --once: exit %d\nstdout:\n%s\nwant one line with %q\nstderr:\n%s", code, stdout.String(), want, stderr.String())
	}
	if err := holder.Ping(ctx); err == nil {
		t.Fatal("the stalled holder's session still answers")
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(ctx, []string{"reap", "--db", db.DSN}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--after") {
		t.Fatalf("reap without --after: exit %d, %s", code, stderr.String())
	}
}
