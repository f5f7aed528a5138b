package proxy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
)

// bypassSQL builds the database testdata/bypass_routes.py attacks: schema
// shop owned by a NOLOGIN role (%[1]s), readable and writable (TRUNCATE too,
// so that the trigger, not a missing grant, refuses it) by the application
// role (%[2]s), which owns schema app for its own objects. Protected:
// orders ('order:' || id; deleting a customer cascades into it), events
// (partitioned, with a sub-partitioned partition; 'acct:' || account),
// ledger (with an inheritance child; 'acct:' || acct).
const bypassSQL = `
CREATE SCHEMA shop AUTHORIZATION %[1]s;
SET ROLE %[1]s;
CREATE TABLE shop.customers (id int PRIMARY KEY, name text);
CREATE TABLE shop.orders (id int PRIMARY KEY, customer int REFERENCES shop.customers ON DELETE CASCADE, state text, amount numeric);
CREATE TABLE shop.events (id int, account int, body text) PARTITION BY RANGE (account);
CREATE TABLE shop.events_p0 PARTITION OF shop.events FOR VALUES FROM (0) TO (100);
CREATE TABLE shop.events_p1 PARTITION OF shop.events FOR VALUES FROM (100) TO (200) PARTITION BY HASH (id);
CREATE TABLE shop.events_p1a PARTITION OF shop.events_p1 FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE shop.events_p1b PARTITION OF shop.events_p1 FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE shop.ledger (id int, acct int, amt int);
CREATE TABLE shop.ledger_2024 () INHERITS (shop.ledger);
INSERT INTO shop.customers VALUES (1, 'ann'), (2, 'bob');
INSERT INTO shop.orders VALUES (1, 1, 'new', 10), (2, 1, 'new', 20), (3, 2, 'new', 30);
INSERT INTO shop.events VALUES (1, 5, 'a'), (2, 50, 'b'), (100, 150, 'c'), (101, 151, 'd');
INSERT INTO shop.ledger VALUES (1, 7, 100);
INSERT INTO shop.ledger_2024 VALUES (2, 8, 200);
RESET ROLE;
GRANT USAGE ON SCHEMA shop TO %[2]s;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA shop TO %[2]s;
CREATE SCHEMA app AUTHORIZATION %[2]s;
SELECT fencegate.protect('shop.orders', $$'order:' || id$$);
SELECT fencegate.protect('shop.events', $$'acct:' || account$$);
SELECT fencegate.protect('shop.ledger', $$'acct:' || acct$$);
SELECT fencegate.set_mark('order:1', 9, 'bypass suite');
SELECT fencegate.set_mark('order:2', 50, 'bypass suite');
SELECT fencegate.set_mark('acct:5', 9, 'bypass suite');
`

// python finds a python3 with psycopg2, or fails the test saying how to
// get one: the bypass suite is never skipped.
func python(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			tried = append(tried, p+": not found")
			continue
		}
		out, err := exec.Command(path, "-c", "import psycopg2").CombinedOutput()
		if err == nil {
			return path
		}
		tried = append(tried, fmt.Sprintf("%s: %s", path, bytes.TrimSpace(out)))
	}
	t.Fatalf("the bypass suite needs python3 with psycopg2 (apt-get install python3-psycopg2, or pip install psycopg2-binary): %q", tried)
	return ""
}

// TestBypassRoutesPsycopg2 sends every route of testdata/bypass_routes.py
// from psycopg2, as the application role, straight to PostgreSQL and
// through the proxy; the script's referee fails it when a protected row
// changed or a mark went down.
func TestBypassRoutesPsycopg2(t *testing.T) {
	py := python(t)
	db := pgfencetest.New(t)
	data := pgfencetest.Role(t, db.DSN, "fg_data_", "NOLOGIN")
	execAdmin(t, db.DSN, fmt.Sprintf(bypassSQL, data, db.App))
	proxied := proxytest.Start(t, db.AppDSN)
	cmd := exec.Command(py, "testdata/bypass_routes.py", db.DSN, "direct="+db.AppDSN, "proxy="+proxied)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10")
	out, err := cmd.CombinedOutput()
	t.Logf("bypass_routes.py:\n%s", out)
	if err != nil {
		t.Fatalf("bypass_routes.py: %v (see the FAIL lines above)", err)
	}
	if !bytes.Contains(out, []byte(", 0 failed")) {
		t.Fatalf("bypass_routes.py ended without its summary line")
	}
}
