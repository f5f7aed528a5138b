package pgfence_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// Attack routes that PostgreSQL 16, 17 and 18 added: privileges, commands
// and catalog entries that did not exist on 15, where every other attack
// test was first written. Each test needs the major its route appeared in
// and skips, saying so, on an older server; the version matrix
// (scripts/pg-matrix.sh) runs them on every major. Every route ends with
// the protected rows unchanged and no mark lowered.

// needMajor skips the test unless the test server is PostgreSQL major or
// newer; it asks before any fixture is built.
func needMajor(t *testing.T, major int, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testutil.PostgresAdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	v, err := pgfence.ReadServerVersion(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if v.Major() < major {
		t.Skipf("%s needs PostgreSQL %d or newer; the server is %s", what, major, v.Text)
	}
}

// unchanged fails unless the protected tables and the marks read as before.
func (f *fixture) unchanged(t *testing.T, before string) {
	t.Helper()
	if after := f.snapshot(t); after != before {
		t.Fatalf("protected rows or marks changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestVersionsMaintainRole: PostgreSQL 17's predefined role pg_maintain
// holds MAINTAIN on every relation, fencegate.marks and
// fencegate.signing_keys included, and MAINTAIN lets LOCK TABLE take an
// ACCESS EXCLUSIVE lock. A member so stalls every fence of the database
// (each waits for the mark's lock and gives up with FG004) and every check
// of the gate, which reads the marks' catalog entries; CLUSTER and VACUUM
// FULL of the marks do the same while they run. An application role has
// SELECT on the marks and can take ACCESS SHARE only. Before PrivilegeQuery
// named pg_maintain, the gate admitted its members (PrivilegeQuery returned
// no row for them).
func TestVersionsMaintainRole(t *testing.T) {
	needMajor(t, 17, "pg_maintain")
	f := newFixture(t)
	ctx := context.Background()
	maint := pgfencetest.Role(t, f.db.DSN, "fg_maint_", "LOGIN IN ROLE pg_maintain, "+f.db.App)
	got := reasons(t, f.db.DSN, maint)
	if !strings.Contains(strings.Join(got, "\n"), "pg_maintain") {
		t.Errorf("PrivilegeQuery as a member of pg_maintain = %q, want it named", got)
	}

	// What it could do had the gate admitted it: lock the marks.
	c, err := f.roleConn(t, maint)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE fencegate.marks IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatalf("LOCK fencegate.marks as a member of pg_maintain: %v (the route is gone; keep the refusal anyway)", err)
	}
	fenced := f.appConn(t)
	mustExec(t, fenced, "SET fencegate.fence_timeout = '300ms'")
	_, err = fenced.Exec(ctx, fencegate.FenceSQL, "order:1", int64(1))
	expectErr(t, "a fence while a member of pg_maintain locks the marks", err, fencegate.CodeFenceTimeout)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestVersionsMaintainGranted: MAINTAIN (PostgreSQL 17) granted on objects
// of schema fencegate is a grant like any other: HealthQuery reports it
// (so the gate refuses every session until it is gone) and Install revokes
// it. MAINTAIN on a protected table, and the maintenance commands it
// allows (LOCK, CLUSTER, VACUUM FULL, ANALYZE, REINDEX), rewrite no row's
// values and leave the checks in place.
func TestVersionsMaintainGranted(t *testing.T) {
	needMajor(t, 17, "the MAINTAIN privilege")
	f := newFixture(t)
	ctx := context.Background()
	mustExec(t, f.admin, fmt.Sprintf("GRANT MAINTAIN ON fencegate.marks, fencegate.signing_keys, fencegate.audit TO %[1]s; GRANT MAINTAIN ON shop.orders, shop.events, shop.ledger TO %[1]s", f.db.App))
	joined := strings.Join(health(t, f.admin), "\n")
	for _, rel := range []string{"marks", "signing_keys", "audit"} {
		if !strings.Contains(joined, "MAINTAIN on fencegate."+rel+" is granted to "+f.db.App) {
			t.Errorf("HealthQuery = %q, want MAINTAIN on fencegate.%s named", joined, rel)
		}
	}
	before := f.snapshot(t)
	for _, q := range []string{
		"BEGIN; LOCK TABLE shop.orders IN ACCESS EXCLUSIVE MODE; COMMIT",
		"CLUSTER shop.orders USING orders_pkey",
		"VACUUM FULL shop.orders",
		"VACUUM FULL shop.ledger",
		"ANALYZE shop.events",
		"REINDEX TABLE shop.orders",
		"BEGIN; LOCK TABLE fencegate.marks IN ACCESS EXCLUSIVE MODE; COMMIT",
		"VACUUM FULL fencegate.marks",
	} {
		_ = script(f.app, q) // allowed or not: what follows must hold
	}
	f.unchanged(t, before)
	err := attempt(ctx, f.app, nil, []string{"UPDATE shop.orders SET state = 'x' WHERE id = 1"}, true)
	expectErr(t, "an unfenced UPDATE after the maintenance commands", err, fencegate.CodeUnfenced)

	if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner}); err != nil {
		t.Fatal(err)
	}
	if got := health(t, f.admin); len(got) != 0 {
		t.Fatalf("HealthQuery after Install = %q", got)
	}
	var n int
	if err := f.admin.QueryRow(ctx, `SELECT count(*) FROM pg_class c, aclexplode(c.relacl) a
		WHERE c.relnamespace = 'fencegate'::regnamespace AND a.privilege_type = 'MAINTAIN' AND a.grantee <> c.relowner`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d MAINTAIN grants left in schema fencegate after Install", n)
	}
}
