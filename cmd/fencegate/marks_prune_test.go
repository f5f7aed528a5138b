package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

// TestMarksPrune: 'fencegate marks prune' deletes the marks at or below
// the floor and says so; a lower floor changes nothing and says so;
// 'marks stats' and 'schema status' print the floor; the application role
// is refused; usage errors name the flag and exit 2.
func TestMarksPrune(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	app := db.AppConn(t)
	for _, q := range []string{"SELECT fencegate.fence('a', 5)", "SELECT fencegate.fence('b', 50)", "SELECT fencegate.fence('c', 500)"} {
		if _, err := app.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cmd := func(args ...string) (int, string, string) {
		t.Helper()
		t.Setenv("DATABASE_URL", "")
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := cmd("marks", "prune", "--db", db.DSN, "--floor", "50")
	if code != 0 || errOut != "" || !strings.Contains(out, ": 0 -> 50\n") || !strings.Contains(out, "deleted 2 marks at or below 50 in ") {
		t.Fatalf("prune: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = cmd("marks", "prune", "--db", db.DSN, "--floor", "10")
	if code != 0 || errOut != "" || !strings.Contains(out, "is already 50: --floor 10 changes nothing") || !strings.Contains(out, "deleted 0 marks") {
		t.Fatalf("prune lower: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if _, err := app.Exec(ctx, "SELECT fencegate.fence('a', 50)"); err == nil || !strings.Contains(err.Error(), "marks at or below 50 were pruned (floor 50)") {
		t.Fatalf("fence at the floor: %v", err)
	}
	code, out, errOut = cmd("marks", "stats", "--db", db.DSN)
	for _, want := range []string{"marks:        1\n", "floor:        50\n", "size on disk: ", "oldest mark:  20"} {
		if code != 0 || errOut != "" || !strings.Contains(out, want) {
			t.Fatalf("stats: exit %d, want %q\nstdout:\n%s\nstderr:\n%s", code, want, out, errOut)
		}
	}
	code, out, _ = cmd("schema", "status", "--db", db.DSN)
	if code != 0 || !strings.Contains(out, "floor:             50") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	code, _, errOut = cmd("marks", "prune", "--db", db.AppDSN, "--floor", "1000")
	if code == 0 || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("prune as the application role: exit %d, stderr %q", code, errOut)
	}
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"marks", "prune", "--db", db.DSN}, "missing --floor N"},
		{[]string{"marks", "prune", "--db", db.DSN, "--floor", "-3"}, `--floor "-3" is not a non-negative integer`},
		{[]string{"marks", "prune", "--db", db.DSN, "--floor", "x"}, `--floor "x" is not a non-negative integer`},
		{[]string{"marks", "prune", "--db", db.DSN, "--floor", "5", "--batch", "0"}, "--batch 0 must be at least 1"},
		{[]string{"marks", "prune", "--floor", "5"}, "missing --db DSN"},
		{[]string{"marks", "prune", "extra", "--db", db.DSN, "--floor", "5"}, `unexpected argument "extra"`},
		{[]string{"marks", "stats", "extra", "--db", db.DSN}, `unexpected argument "extra"`},
	} {
		if code, _, errOut := cmd(c.args...); code != 2 || !strings.Contains(errOut, c.err) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, errOut, c.err)
		}
	}
}
