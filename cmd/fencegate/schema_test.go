package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

// TestSchemaCommands drives schema, protect, unprotect and marks through
// the command line against a real database, in order: each step's exit
// status and output, and bad input giving one line that says what to do.
func TestSchemaCommands(t *testing.T) {
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	db.Exec(t, "CREATE TABLE orders (id int PRIMARY KEY, state text); INSERT INTO orders VALUES (1, 'new'), (2, 'new')")
	other := testutil.PostgresDB(t) // a database without the schema
	app2 := pgfencetest.Role(t, db.DSN, "fg_app2_", "LOGIN")
	unreachable := "postgres://postgres@127.0.0.1:" + itoaPort(testutil.FreePort(t)) + "/x?sslmode=disable&connect_timeout=5"
	for _, c := range []struct {
		args []string
		code int
		out  []string // each in stdout
		err  string   // in stderr ("" = stderr empty)
	}{
		{[]string{"schema", "status", "--db", db.DSN}, 1, []string{"schema fencegate:  not installed", "problem: schema fencegate is not installed"}, "1 problem(s)"},
		{[]string{"schema", "upgrade", "--db", db.DSN, "--owner", db.Owner}, 1, nil, "not installed"},
		{[]string{"schema", "install", "--db", db.AppDSN, "--owner", db.Owner}, 1, nil, "insufficient privilege"},
		{[]string{"schema", "install", "--db", db.DSN, "--owner", db.Owner, "--grant", "fg_nobody_x"}, 1, nil, "role fg_nobody_x does not exist"},
		{[]string{"schema", "install", "--db", db.DSN, "--owner", db.Owner, "--grant", db.App}, 0,
			[]string{fmt.Sprintf("installed schema fencegate version %d", pgfence.SchemaVersion), "created schema fencegate owned by " + db.Owner, "application roles: " + db.App}, ""},
		{[]string{"schema", "install", "--db", db.DSN, "--owner", db.Owner}, 0, []string{"is up to date; nothing changed"}, ""},
		{[]string{"schema", "install", "--db", db.DSN, "--owner", db.Owner, "--grant", app2}, 0, []string{"is up to date; granted " + app2 + " what taking fences needs"}, ""},
		{[]string{"schema", "upgrade", "--db", db.DSN, "--owner", db.Owner}, 0, []string{"is up to date"}, ""},
		{[]string{"protect", "orders", "--db", db.DSN}, 2, nil, "missing --resource"},
		{[]string{"protect", "--resource", "'order:' || id", "--db", db.DSN}, 2, nil, "want exactly one TABLE"},
		{[]string{"protect", "orders", "--resource", "'order:' ||", "--db", db.DSN}, 1, nil, "syntax error"},
		{[]string{"protect", "orders", "--resource", "'order:' || nope", "--db", db.DSN}, 1, nil, `column "nope" does not exist`},
		{[]string{"protect", "nope", "--resource", "'x'", "--db", db.DSN}, 1, nil, `relation "nope" does not exist`},
		{[]string{"protect", "orders", "--resource", "'order:' || id", "--db", db.AppDSN}, 1, nil, "permission denied"},
		{[]string{"protect", "orders", "--resource", "'order:' || id", "--db", db.DSN}, 0,
			[]string{"protected public.orders", "each row's resource is ('order:'::text || id)", "warning: public.orders is owned by role postgres, which can log in"}, ""},
		{[]string{"schema", "status", "--db", db.DSN}, 0, []string{fmt.Sprintf("version %d, owned by %s", pgfence.SchemaVersion, db.Owner), "orders", "('order:'::text || id)", "ok: no problems"}, ""},
		{[]string{"marks", "set", "order:1", "7", "--db", db.DSN, "--reason", "test"}, 0, []string{`mark of "order:1"`, "no mark -> 7"}, ""},
		{[]string{"marks", "set", "order:1", "3", "--db", db.DSN}, 0, []string{"7 -> 3"}, ""},
		{[]string{"marks", "set", "order:1", "-3", "--db", db.DSN}, 2, nil, "negative"},
		{[]string{"marks", "set", "order:1", "x", "--db", db.DSN}, 2, nil, "not a non-negative integer"},
		{[]string{"marks", "set", "order:1", "5", "--db", db.AppDSN}, 1, nil, "permission denied for function set_mark; connect with --db as a superuser"},
		{[]string{"marks", "show", "--db", db.DSN}, 0, []string{"RESOURCE", "order:1", "3"}, ""},
		{[]string{"marks", "show", "order:9", "--db", db.DSN}, 0, []string{"RESOURCE"}, `"order:9" has no mark`},
		{[]string{"marks", "show", "--db", other}, 1, nil, "schema fencegate is not installed"},
		{[]string{"unprotect", "orders", "--db", db.DSN}, 0, []string{"unprotected orders"}, ""},
		{[]string{"unprotect", "orders", "--db", db.DSN}, 1, nil, "is not protected"},
		{[]string{"schema", "status", "--db", unreachable}, 1, nil, "cannot connect to database x"},
		{[]string{"schema", "status", "--db", "postgres://%zz"}, 2, nil, "cannot parse the DSN"},
		{[]string{"schema"}, 2, nil, "missing subcommand"},
		{[]string{"schema", "drop"}, 2, nil, `unknown subcommand "drop"`},
		{[]string{"marks"}, 2, nil, "missing subcommand"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Setenv("DATABASE_URL", "")
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), c.args, &stdout, &stderr)
			if code != c.code {
				t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout.String(), stderr.String())
			}
			for _, w := range c.out {
				if !strings.Contains(stdout.String(), w) {
					t.Fatalf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			if c.err == "" {
				if stderr.Len() != 0 {
					t.Fatalf("stderr: %s", stderr.String())
				}
				return
			}
			if !strings.Contains(stderr.String(), c.err) {
				t.Fatalf("stderr lacks %q:\n%s", c.err, stderr.String())
			}
			if c.code != 0 {
				lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
				last := lines[len(lines)-1]
				if !strings.HasPrefix(last, "fencegate ") || strings.Contains(last, "password") {
					t.Fatalf("the error is not one clear line: %q", stderr.String())
				}
			}
		})
	}
}

// TestSchemaNoSecretInErrors: a DSN's password never appears in output.
func TestSchemaNoSecretInErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	port := itoaPort(testutil.FreePort(t))
	code := run(context.Background(), []string{"schema", "status", "--db", "postgres://u:hunter2@127.0.0.1:" + port + "/d?connect_timeout=5"}, &stdout, &stderr)
	if code != 1 || strings.Contains(stderr.String()+stdout.String(), "hunter2") {
		t.Fatalf("exit %d, output %q %q", code, stdout.String(), stderr.String())
	}
}

func itoaPort(p int) string { return strconv.Itoa(p) }
