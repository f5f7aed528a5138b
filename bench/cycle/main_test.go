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
	table, steps, ok := strings.Cut(out.String(), "the steps of one cycle at one worker")
	t.Log(out.String())
	if !ok {
		t.Fatal("no table of the steps at one worker")
	}
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
	// One row per cycle and mode; the fenced rows time the token and the
	// confirmation, which the unfenced cycles do not have.
	for _, want := range []string{"bsm/redislock, no fence", "redsync, no fence"} {
		if got := strings.Count(steps, want); got != 1 {
			t.Fatalf("%q appears %d times in the steps table, want 1", want, got)
		}
	}
	fenced := 0
	for _, line := range strings.Split(steps, "\n") {
		if !strings.Contains(line, "lockclient + token + fence") {
			continue
		}
		fenced++
		// cycles, then grant, token, confirm, BEGIN, UPDATE, COMMIT,
		// release and their sum: nine numbers, none missing.
		if f := strings.Fields(line[strings.Index(line, "fence")+len("fence"):]); len(f) != 9 {
			t.Fatalf("fenced steps row %q has %d figures, want 9", line, len(f))
		}
	}
	if fenced != 2 {
		t.Fatalf("the fenced cycle appears %d times in the steps table, want 2", fenced)
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
