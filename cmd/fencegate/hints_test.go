package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/jackc/pgx/v5"
)

// A library error that names Config fields gets the flags that set them,
// and keeps its sentinels.
func TestServeHintNamesFlags(t *testing.T) {
	o := &tokenServeOpts{id: "n1", raftAddr: "127.0.0.1:7201", apiAddr: "127.0.0.1:7101", tls: &tlsFlags{}}
	for _, tc := range []struct {
		err      error
		sentinel error
		want     string
	}{
		{&raftstore.FieldError{Fields: []string{"Peers", "ID"}, Err: fmt.Errorf("%w: the peers list does not name this node", raftstore.ErrBadConfig)},
			raftstore.ErrBadConfig, "set by --peers and --id"},
		{&raftstore.FieldError{Fields: []string{"APIAddr"}, Err: fmt.Errorf("%w: api address in use", raftstore.ErrAddrInUse)},
			raftstore.ErrAddrInUse, "set by --api-addr"},
		{fmt.Errorf("%w: n1 lost its data", raftstore.ErrMustReplace), raftstore.ErrMustReplace, "--join API-URL-OF-A-MEMBER"},
		{fmt.Errorf("%w: nothing to start from", raftstore.ErrNoFounding), raftstore.ErrNoFounding, "give --peers"},
		{tokenservice.ErrBadConfig, tokenservice.ErrBadConfig, ""},
	} {
		got := serveHint(tc.err, o)
		if !errors.Is(got, tc.sentinel) {
			t.Errorf("serveHint(%v) = %v: lost %v", tc.err, got, tc.sentinel)
		}
		if !strings.HasPrefix(got.Error(), tc.err.Error()) || !strings.Contains(got.Error(), tc.want) {
			t.Errorf("serveHint(%v) = %q; want the message and then %q", tc.err, got, tc.want)
		}
	}
	if serveHint(nil, o) != nil {
		t.Error("serveHint(nil) is not nil")
	}
}

// A command a hint prints, pasted into a shell, runs fencegate with the
// table's name as one argument, whatever the name: the shell expands
// nothing in it, and fencegate (PostgreSQL) reads the same table back.
func TestHintCommandsAreSafeToPaste(t *testing.T) {
	dir := t.TempDir()
	pwn := filepath.Join(dir, "pwn")
	for _, tc := range []struct{ schema, table, expr string }{
		{"public", "x$(touch " + pwn + ")", "'order:' || id"},
		{"shop", "o'brien`touch " + pwn + "`", "'it''s ' || id"},
		{"we\"ird", "a b; touch " + pwn, "$(touch " + pwn + ")"},
	} {
		cmd := protectCommand(pgx.Identifier{tc.schema, tc.table}.Sanitize(), tc.expr)
		// A stand-in for fencegate that prints its arguments, one a line.
		script := "fencegate() { for a in \"$@\"; do printf '%s\\n' \"$a\"; done; }; " + cmd
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("sh -c %q: %v", script, err)
		}
		if _, err := os.Stat(pwn); err == nil {
			t.Fatalf("pasting %q ran a command", cmd)
		}
		args := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		want := []string{"protect", pgx.Identifier{tc.schema, tc.table}.Sanitize(), "--resource", tc.expr, "--db", "DSN"}
		if strings.Join(args, "\x00") != strings.Join(want, "\x00") {
			t.Errorf("%s\n  gave the arguments %q, want %q", cmd, args, want)
		}
	}
}

// The dev stack names configuration fields; 'fencegate dev' and the demos
// show their flags in their place, and the error is still the stack's.
func TestSettingFlags(t *testing.T) {
	base := fmt.Errorf("%w: 127.0.0.1:5432 answers but refuses; pass PersistentConfig.Postgres DSN", servers.ErrNoPostgres)
	err := devFlags.err(base)
	if want := "devstack: no PostgreSQL: 127.0.0.1:5432 answers but refuses; pass --postgres DSN"; err.Error() != want {
		t.Fatalf("devFlags.err = %q; want %q", err, want)
	}
	if !errors.Is(err, servers.ErrNoPostgres) {
		t.Fatalf("devFlags.err lost the sentinel: %v", err)
	}
	if other := errors.New("no field here"); devFlags.err(other) != other || devFlags.err(nil) != nil {
		t.Fatal("devFlags.err changed an error that names no field")
	}
	if got := devFlags.text("  PostgreSQL  dsn  (PersistentConfig.Postgres)\n"); got != "  PostgreSQL  dsn  (--postgres)\n" {
		t.Fatalf("devFlags.text = %q", got)
	}
	var b strings.Builder
	fmt.Fprintf(demoFlags.writer(&b), "  Redis        %s (%s)\n", "h:1", "ThrowawayConfig.Redis")
	if b.String() != "  Redis        h:1 (--redis)\n" {
		t.Fatalf("demoFlags.writer wrote %q", b.String())
	}
}
