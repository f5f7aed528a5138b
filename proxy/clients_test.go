package proxy_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// psql runs a psql script through dsn and returns its combined output and
// whether it succeeded.
func psql(t *testing.T, dsn, script string) (string, bool) {
	t.Helper()
	cmd := exec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", dsn)
	cmd.Stdin = strings.NewReader("\\set VERBOSITY verbose\n" + script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("run psql: %v", err)
		}
	}
	return string(out), err == nil
}

func TestPsql(t *testing.T) {
	fx := newFixture(t)
	out, ok := psql(t, fx.proxied, `BEGIN;
SELECT fencegate.fence('order:42', 34);
UPDATE orders SET state = 'paid' WHERE id = 42;
COMMIT;
`)
	if !ok || !strings.Contains(out, "34") {
		t.Fatalf("fenced session failed:\n%s", out)
	}
	if got, want := state(t, fx.admin, 42), "paid"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	for _, tc := range []struct{ name, script, code string }{
		{"stale", "BEGIN;\nSELECT fencegate.fence('order:42', 33);\nUPDATE orders SET state = 'stale' WHERE id = 42;\nCOMMIT;\n", "FG001"},
		{"unfenced autocommit", "UPDATE orders SET state = 'x' WHERE id = 42;\n", "FG002"},
		{"unfenced tx", "BEGIN;\nUPDATE orders SET state = 'x' WHERE id = 42;\nCOMMIT;\n", "FG002"},
		{"other resource", "BEGIN;\nSELECT fencegate.fence('order:43', 50);\nUPDATE orders SET state = 'x' WHERE id = 42;\n", "FG002"},
		{"chained", "BEGIN;\nSELECT fencegate.fence('order:42', 34);\nCOMMIT AND CHAIN;\nUPDATE orders SET state = 'x' WHERE id = 42;\n", "FG002"},
		{"negative", "BEGIN;\nSELECT fencegate.fence('order:42', -1);\n", "FG003"},
		{"empty resource", "BEGIN;\nSELECT fencegate.fence('', 1);\n", "FG003"},
		{"null token", "BEGIN;\nSELECT fencegate.fence('order:42', NULL);\n", "FG003"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := psql(t, fx.proxied, tc.script)
			if ok || !strings.Contains(out, tc.code) {
				t.Fatalf("want failure with %s, got ok=%v:\n%s", tc.code, ok, out)
			}
		})
	}
	if got, want := state(t, fx.admin, 42), "paid"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	if got, want := mark(t, fx.admin, "order:42"), int64(34); got != want {
		t.Fatalf("mark = %d, want %d", got, want)
	}
	// psql -c with several statements sends them as one Query message.
	cmd := exec.Command("psql", "-X", "-v", "ON_ERROR_STOP=1", fx.proxied, "-c",
		"BEGIN; SELECT fencegate.fence('order:42', 35); UPDATE orders SET state = 'shipped' WHERE id = 42; COMMIT;")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("psql -c: %v\n%s", err, out)
	}
	if got, want := state(t, fx.admin, 42), "shipped"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
}

func TestPsycopg2(t *testing.T) {
	fx := newFixture(t)
	cmd := exec.Command("/usr/bin/python3", "testdata/psycopg_contract.py", fx.proxied)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("ok")) {
		t.Fatalf("psycopg2 contract: %v\n%s", err, out)
	}
}

func TestPgbench(t *testing.T) {
	fx := newFixture(t)
	if out, err := exec.Command("pgbench", "-i", "-q", "-s", "1", fx.admin).CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	execAdmin(t, fx.admin, "GRANT SELECT, INSERT, UPDATE ON pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history TO "+fx.role)
	protect(t, fx.admin, "pgbench_accounts", "'bench'")
	script := t.TempDir() + "/fence.sql"
	if err := os.WriteFile(script, []byte(`\set aid random(1, 100000)
\set tok 1
BEGIN;
SELECT fencegate.fence('bench', :tok);
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
COMMIT;
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-S", "-M", "simple"},
		{"-S", "-M", "extended"},
		{"-S", "-M", "prepared"},
		{"-f", script, "-M", "simple"},
		{"-f", script, "-M", "extended"},
		{"-f", script, "-M", "prepared"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			all := append([]string{"-n", "-c", "2", "-t", "50"}, args...)
			out, err := exec.Command("pgbench", append(all, fx.proxied)...).CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("number of failed transactions: 0")) {
				t.Fatalf("pgbench %v: %v\n%s", all, err, out)
			}
		})
	}
	var sum int64
	c := connect(t, fx.admin)
	if err := c.QueryRow(t.Context(), "SELECT sum(abalance) FROM pgbench_accounts").Scan(&sum); err != nil || sum != 300 {
		t.Fatalf("sum(abalance) = %d, %v; want 300 (3 runs x 2 clients x 50)", sum, err)
	}
	// pgbench's default transaction writes without a fence: refused.
	out, err := exec.Command("pgbench", "-n", "-c", "1", "-t", "1", "-b", "simple-update", fx.proxied).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("write to public.pgbench_accounts refused")) {
		t.Fatalf("unfenced pgbench: %v, want the write refused\n%s", err, out)
	}
	// Fences accepted: each fenced transaction's fence, in all three protocols.
	if got, want := testutilCounter(fx.p.Metrics().FencesAccepted), float64(300); got != want {
		t.Errorf("fences accepted = %v, want %v", got, want)
	}
}

// Clients that look for a read-write server (libpq's and pgx's
// target_session_attrs=read-write, as in multi-host DSNs of an HA setup)
// take the proxy for one: it is one. Were it taken for a standby, such a
// DSN would skip the proxy. What PostgreSQL enforces does not change.
func TestTargetSessionAttrsReadWrite(t *testing.T) {
	fx := newFixture(t)
	dsn := withParams(fx.proxied, "target_session_attrs=read-write")
	out, ok := psql(t, dsn, "SHOW transaction_read_only;\nBEGIN;\nSELECT fencegate.fence('order:42', 7);\nUPDATE orders SET state = 'psql-rw' WHERE id = 42;\nCOMMIT;\n")
	if !ok || !strings.Contains(out, "off") {
		t.Fatalf("libpq with target_session_attrs=read-write through the proxy: ok=%v\n%s", ok, out)
	}
	if got, want := state(t, fx.admin, 42), "psql-rw"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	// A multi-host DSN whose first host is a standby-like read-only
	// server would be skipped; here the proxy comes first and is taken.
	ctx := context.Background()
	c := connect(t, dsn) // pgx checks SHOW transaction_read_only
	if _, err := c.Exec(ctx, "UPDATE orders SET state = 'x' WHERE id = 42"); sqlstate(err) != "FG002" {
		t.Fatalf("unfenced write through a read-write-checked session: %v, want FG002", err)
	}
	var dro string
	if err := c.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&dro); err != nil || dro != "off" {
		t.Fatalf("SHOW default_transaction_read_only = %q, %v; want off", dro, err)
	}
	// And a client that asks for read-only sessions gets them, untouched.
	ro := connect(t, withParams(fx.proxied, "default_transaction_read_only=on"))
	if err := ro.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&dro); err != nil || dro != "on" {
		t.Fatalf("SHOW default_transaction_read_only with the option = %q, %v; want on", dro, err)
	}
}
