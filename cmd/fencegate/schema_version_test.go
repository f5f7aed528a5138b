package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
)

// TestRefusesPostgres13 runs a real PostgreSQL 13 (past its end of life,
// and without pg_type.typsubscript, which protect's expression check reads):
// schema install, upgrade and status refuse it in one line that names the
// supported range and changes nothing, and the gate refuses sessions to it.
func TestRefusesPostgres13(t *testing.T) {
	admin, _ := testutil.StartPostgres(t, testutil.PostgresBinOf(t, 13))
	for _, args := range [][]string{
		{"schema", "install", "--guard-ddl"},
		{"schema", "upgrade"},
		{"schema", "status"},
		{"schema", "install", "--allow-newer-postgres"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append(args, "--db", admin), &stdout, &stderr)
			if code != 1 {
				t.Fatalf("exit status %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
			}
			msg := strings.TrimSpace(stderr.String())
			for _, want := range []string{"the server runs PostgreSQL 13.", "fencegate supports PostgreSQL 14 to 18", "docs/operations.md#supported-postgresql-versions"} {
				if !strings.Contains(msg, want) {
					t.Errorf("stderr lacks %q: %q", want, msg)
				}
			}
			if strings.Count(msg, "\n") != 0 {
				t.Errorf("not one line: %q", msg)
			}
		})
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var schemas int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = 'fencegate'").Scan(&schemas); err != nil || schemas != 0 {
		t.Fatalf("schema fencegate after refused installs: %d, %v; want none", schemas, err)
	}
	if _, err := c.Exec(ctx, "CREATE ROLE app LOGIN"); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(admin)
	u.User = url.User("app")
	_, err = pgx.Connect(ctx, proxytest.Start(t, u.String()))
	if err == nil || !strings.Contains(err.Error(), "FG005") || !strings.Contains(err.Error(), "PostgreSQL 14 to 18") {
		t.Fatalf("a session through the gate to PostgreSQL 13: %v, want FATAL FG005 naming the supported range", err)
	}
}
