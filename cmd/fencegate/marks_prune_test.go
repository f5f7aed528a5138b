package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// marks prune --older-than D --servers URLS prunes to the floor a real
// token cluster gives for D: the marks of tokens taken before it go, a
// holder of such a token is refused (FG001), a later one is kept; with
// nothing that old it says so and prunes nothing; the flags' misuses are
// usage errors.
func TestMarksPruneOlderThan(t *testing.T) {
	defer raftstore.SetCheckpointIntervalForTest(50 * time.Millisecond)()
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.ReserveSize = 2 }))
	servers := strings.Join(c.APIURLs(), ",")
	cl := c.Client(t)
	db := pgfencetest.New(t)
	ctx := context.Background()
	cmd := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := cmd("marks", "prune", "--db", db.DSN, "--older-than", "1h", "--servers", servers)
	if code != 0 || !strings.Contains(out, "no token is 1h old yet") {
		t.Fatalf("prune --older-than 1h on a new cluster: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	fenceWith := func(resource string, token int64) error {
		conn, err := pgx.Connect(ctx, db.AppDSN)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var got int64
			return tx.QueryRow(ctx, fencegate.FenceSQL, resource, token).Scan(&got)
		})
	}
	old, err := cl.NextToken(ctx, "order:old")
	if err != nil {
		t.Fatal(err)
	}
	if err := fenceWith("order:old", old); err != nil {
		t.Fatal(err)
	}
	for range 6 { // entries that move the counter, and so checkpoints
		if _, err := cl.NextToken(ctx, "order:x"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(80 * time.Millisecond)
	}
	time.Sleep(400 * time.Millisecond)
	recent, err := cl.NextToken(ctx, "order:new")
	if err != nil {
		t.Fatal(err)
	}
	if err := fenceWith("order:new", recent); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cmd("marks", "prune", "--db", db.DSN, "--older-than", "300ms", "--servers", servers)
	if code != 0 || !strings.Contains(out, "token service: the counter was ") || !strings.Contains(out, "deleted 1 marks") {
		t.Fatalf("prune --older-than 300ms: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var pe *pgconn.PgError
	if err := fenceWith("order:old", old); !errors.As(err, &pe) || pe.Code != fencegate.CodeStaleToken {
		t.Fatalf("the pruned holder's fence with %d: %v, want FG001", old, err)
	}
	if err := fenceWith("order:new", recent); err != nil {
		t.Fatalf("the recent holder's fence with %d: %v, want accepted", recent, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--older-than", "1h"}, "--older-than needs --servers"},
		{[]string{"--older-than", "soon", "--servers", servers}, "--older-than \"soon\" is not a duration"},
		{[]string{"--older-than", "1h", "--floor", "5", "--servers", servers}, "not both"},
		{[]string{"--floor", "5", "--servers", servers}, "--servers is used only with --older-than"},
		{[]string{}, "missing --floor N or --older-than DURATION"},
	} {
		code, out, errOut := cmd(append([]string{"marks", "prune", "--db", db.DSN}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("marks prune %v: exit %d, stdout %q, stderr %q; want exit 2 saying %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
