package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestCycleSmoke runs the whole comparison briefly (one run, tiny windows)
// against real Redis servers, a real token cluster and a real PostgreSQL,
// and checks that the table has both cycles at every concurrency in both
// Redis modes, with a ratio for each fenced row, and that every cycle
// committed its UPDATE (a failed cycle fails the run).
func TestCycleSmoke(t *testing.T) {
	testutil.NeedServices(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	err := run(ctx, []string{"--runs", "1", "--duration", "300ms", "--warmup", "100ms", "--concurrency", "1,4",
		"--masters", "3", "--db", testutil.PostgresAdminDSN()}, &out, &errs)
	t.Log(errs.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	table := out.String()
	t.Log(table)
	for _, want := range []string{"bsm/redislock, no fence", "redsync, no fence"} {
		if got := strings.Count(table, want); got != 2 {
			t.Fatalf("%q appears %d times in the table, want 2 (c=1 and c=4)", want, got)
		}
	}
	if got := strings.Count(table, "lockclient + token + fence"); got != 4 {
		t.Fatalf("the fenced cycle appears %d times in the table, want 4", got)
	}
	if got := strings.Count(table, "x\n") + strings.Count(table, "x)\n"); got != 4 {
		t.Fatalf("%d rows end with a ratio, want 4 (every fenced row)", got)
	}
}

func TestCycleFlags(t *testing.T) {
	for _, args := range [][]string{{"--concurrency", "1,x"}, {"--concurrency", "0"}, {"--runs", "0"}, {"--masters", "0"}, {"--nope"}} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), args, &out, &errs); err == nil {
			t.Fatalf("run(%q) succeeded, want an error", args)
		}
	}
}
