package pgfence_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// A command a problem or warning names ("run: fencegate ..."), pasted into
// a shell, passes each table's name to fencegate as one argument, whatever
// the application called the table: the shell expands nothing in it, and
// PostgreSQL reads the same table back. PostgreSQL prints a table called
// x$(touch F)'q as "x$(touch F)'q", whose double quotes, inside a message's
// own, let the shell run touch.
func TestHintsAreSafeToPaste(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fg") // short: table names hold 63 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pwn := filepath.Join(dir, "pwn")
	f := newFixture(t)
	plain := "x$(touch " + pwn + ")'q"
	parted := "p$(touch " + pwn + ")'q"
	parent := "u$(touch " + pwn + ")'q"
	child := "c`touch " + pwn + "`'q"
	id := func(name string) string { return pgx.Identifier{"public", name}.Sanitize() }
	mustExec(t, f.admin, "CREATE TABLE "+id(plain)+" (id int)")
	mustExec(t, f.admin, "CREATE TABLE "+id(parted)+" (id int) PARTITION BY RANGE (id)")
	mustExec(t, f.admin, "CREATE TABLE "+id(parent)+" (id int)")
	mustExec(t, f.admin, "CREATE TABLE "+id(child)+" (id int)")
	for _, name := range []string{plain, parted, child} {
		if err := pgfence.Protect(ctx, f.admin, id(name), "'it''s ' || id"); err != nil {
			t.Fatalf("protect %s: %v", name, err)
		}
	}
	// A broken check (a problem), a partition added after protect (a
	// warning), a protected child of an unprotected table (a problem).
	mustExec(t, f.admin, "ALTER TABLE "+id(plain)+" DISABLE TRIGGER fencegate_upd")
	mustExec(t, f.admin, "CREATE TABLE "+id(parted+"1")+" PARTITION OF "+id(parted)+" FOR VALUES FROM (0) TO (10)")
	mustExec(t, f.admin, "ALTER TABLE "+id(child)+" INHERIT "+id(parent))

	st, err := pgfence.Inspect(ctx, f.admin)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, msg := range append(st.Problems, st.Warnings...) {
		_, cmd, ok := strings.Cut(msg, "run: ")
		if !ok || !strings.Contains(msg, "$(touch") && !strings.Contains(msg, "`touch") {
			continue
		}
		cmd = strings.ReplaceAll(cmd, "; then: ", "; ")
		// A stand-in for fencegate that prints its arguments, one a line,
		// each call ending with a line "--".
		script := "fencegate() { for a in \"$@\"; do printf '%s\\n' \"$a\"; done; echo --; }; " + cmd
		out, err := exec.Command("sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%s\n  sh -c: %v: %s", msg, err, out)
		}
		if _, err := os.Stat(pwn); err == nil {
			t.Fatalf("pasting the command of %q ran touch", msg)
		}
		for _, call := range strings.Split(strings.TrimSuffix(string(out), "--\n"), "--\n") {
			args := strings.Split(strings.TrimSuffix(call, "\n"), "\n")
			if len(args) < 4 || (args[0] != "protect" && args[0] != "unprotect") || args[len(args)-2] != "--db" {
				t.Errorf("%s\n  pasted, called fencegate with %q", msg, args)
				continue
			}
			var table string
			if err := f.admin.QueryRow(ctx, "SELECT c.relname::text FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1)", args[1]).Scan(&table); err != nil {
				t.Errorf("%s\n  pasted, names table %q, which PostgreSQL does not read back: %v", msg, args[1], err)
				continue
			}
			seen[args[0]+" "+table] = true
			if args[0] == "protect" && args[2] == "--resource" && args[3] != "('it''s '::text || id)" && args[3] != "EXPR" {
				t.Errorf("%s\n  pasted, gives --resource %q", msg, args[3])
			}
		}
	}
	for _, want := range []string{"protect " + plain, "protect " + parted, "unprotect " + child, "protect " + parent} {
		if !seen[want] {
			t.Errorf("no message names the command %q; problems %q, warnings %q", want, st.Problems, st.Warnings)
		}
	}
}
