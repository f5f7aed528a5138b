package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// TestMarksHolders: 'fencegate marks holders' prints, one line each, the
// sessions in a transaction that took a fence (and so holds its mark
// locked), and nothing for a session that only read the marks; its usage
// errors exit 2.
func TestMarksHolders(t *testing.T) {
	ctx := context.Background()
	db := pgfencetest.New(t)
	cfg, err := pgx.ParseConfig(db.AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "fg-holds-a-mark"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(context.Background()) })
	reader := db.AppConn(t)
	var pid int
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	cmd := func(args ...string) (int, string, string) {
		t.Helper()
		t.Setenv("DATABASE_URL", "")
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := cmd("marks", "holders", "--db", db.DSN)
	if code != 0 || !strings.Contains(out, "no transaction holds marks locked") || errOut != "" {
		t.Fatalf("with no holder: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if _, err := holder.Exec(ctx, "BEGIN; SELECT fencegate.fence('held:1', 4)"); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Exec(ctx, "BEGIN; SELECT count(*) FROM fencegate.marks"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cmd("marks", "holders", "--db", db.DSN)
	want := fmt.Sprintf("session pid %d: role %s, application \"fg-holds-a-mark\", client 127.0.0.1, state idle in transaction, transaction since ", pid, db.App)
	if code != 0 || errOut != "" || !strings.Contains(out, want) || strings.Count(out, "\n") != 1 {
		t.Fatalf("with a holder: exit %d\nstdout:\n%s\nwant one line with %q\nstderr:\n%s", code, out, want, errOut)
	}
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"marks", "holders", "held:1", "--db", db.DSN}, "want no arguments"},
		{[]string{"marks", "holders"}, "missing --db DSN"},
		{[]string{"marks", "nope"}, `unknown subcommand "nope"; use show, set or holders`},
	} {
		if code, _, errOut := cmd(c.args...); code != 2 || !strings.Contains(errOut, c.err) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, errOut, c.err)
		}
	}
	if code, _, errOut := cmd("marks", "--help"); code != 0 || !strings.Contains(errOut, "holders  print the transactions holding marks locked") {
		t.Errorf("marks --help: exit %d\n%s", code, errOut)
	}
}
