package pgfence_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

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
	testutil.NeedMajor(t, 17, "pg_maintain")
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
	testutil.NeedMajor(t, 17, "the MAINTAIN privilege")
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

// TestVersionsMergeReturning: PostgreSQL 17 lets MERGE return rows
// (RETURNING, merge_action()) and target a view. Every action is still
// checked, straight at a protected table and through a view over it; COPY
// FROM with ON_ERROR ignore (17) skips bad rows, not the check.
func TestVersionsMergeReturning(t *testing.T) {
	testutil.NeedMajor(t, 17, "MERGE ... RETURNING")
	f := newFixture(t)
	ctx := context.Background()
	mustExec(t, f.app, "CREATE VIEW app.ov AS SELECT id, customer, state, amount FROM shop.orders")
	before := f.snapshot(t)
	for _, q := range []string{
		"MERGE INTO shop.orders o USING (VALUES (1)) v(id) ON o.id = v.id WHEN MATCHED THEN UPDATE SET state = 'm' RETURNING merge_action(), o.*",
		"MERGE INTO shop.orders o USING (VALUES (9)) v(id) ON o.id = v.id WHEN NOT MATCHED THEN INSERT (id, state) VALUES (9, 'm') RETURNING merge_action(), o.*",
		"MERGE INTO shop.orders o USING (VALUES (2)) v(id) ON o.id = v.id WHEN MATCHED THEN DELETE RETURNING merge_action(), o.*",
		"MERGE INTO app.ov o USING (VALUES (1)) v(id) ON o.id = v.id WHEN MATCHED THEN UPDATE SET state = 'm' RETURNING merge_action(), o.*",
		"MERGE INTO app.ov o USING (VALUES (3)) v(id) ON o.id = v.id WHEN MATCHED THEN DELETE RETURNING merge_action(), o.*",
		"MERGE INTO app.ov o USING (VALUES (9)) v(id) ON o.id = v.id WHEN NOT MATCHED THEN INSERT (id, state) VALUES (9, 'm') RETURNING merge_action(), o.*",
		"WITH m AS (MERGE INTO shop.orders o USING (VALUES (4)) v(id) ON o.id = v.id WHEN MATCHED THEN UPDATE SET state = 'm' RETURNING o.id) SELECT * FROM m",
		"COPY shop.orders (id, state) FROM STDIN (ON_ERROR ignore)\n10\tx\nnot-a-number\ty",
	} {
		err := attempt(ctx, f.app, []string{"order:5"}, []string{q}, true)
		expectErr(t, q, err, fencegate.CodeUnfenced)
	}
	f.unchanged(t, before)
	// Fenced, the same MERGE goes through and returns its row.
	if err := attempt(ctx, f.app, []string{"order:1"}, []string{"MERGE INTO app.ov o USING (VALUES (1)) v(id) ON o.id = v.id WHEN MATCHED THEN UPDATE SET state = 'm' RETURNING merge_action(), o.*"}, false); err != nil {
		t.Fatalf("a fenced MERGE ... RETURNING: %v", err)
	}
}

// TestVersionsTransactionTimeout: PostgreSQL 17's transaction_timeout ends
// the session of a transaction that runs too long; a fenced write in it
// never commits, and the next holder's fence is not held up beyond it.
func TestVersionsTransactionTimeout(t *testing.T) {
	testutil.NeedMajor(t, 17, "transaction_timeout")
	f := newFixture(t)
	ctx := context.Background()
	before := f.snapshot(t)
	c := f.appConn(t)
	mustExec(t, c, "SET transaction_timeout = '300ms'")
	err := script(c, "BEGIN", "SELECT fencegate.fence('order:1', 1)", "UPDATE shop.orders SET state = 'late' WHERE id = 1", "SELECT pg_sleep(2)", "COMMIT")
	if err == nil {
		t.Fatal("a transaction past transaction_timeout committed")
	}
	var st string
	if err := f.admin.QueryRow(ctx, "SELECT state FROM shop.orders WHERE id = 1").Scan(&st); err != nil || st != "new" {
		t.Fatalf("order 1 = %q, %v; want it unchanged", st, err)
	}
	if err := attempt(ctx, f.appConn(t), []string{"order:1"}, []string{"UPDATE shop.orders SET state = 'next' WHERE id = 1"}, false); err != nil {
		t.Fatalf("the next holder: %v", err)
	}
	f.unchanged(t, before)
}

// TestVersionsReturningOldNew: PostgreSQL 18's RETURNING old/new reads the
// row before and after; the writes it reports are checked as ever.
func TestVersionsReturningOldNew(t *testing.T) {
	testutil.NeedMajor(t, 18, "RETURNING old/new")
	f := newFixture(t)
	ctx := context.Background()
	mustExec(t, f.app, "CREATE VIEW app.ov AS SELECT id, customer, state, amount FROM shop.orders")
	before := f.snapshot(t)
	for _, q := range []string{
		"UPDATE shop.orders SET state = 'u' WHERE id = 1 RETURNING old.*, new.*",
		"UPDATE shop.orders SET id = 99 WHERE id = 7 RETURNING old.fencegate_resource, new.fencegate_resource",
		"INSERT INTO shop.orders (id, state) VALUES (1, 'c') ON CONFLICT (id) DO UPDATE SET state = 'c' RETURNING old.*, new.*",
		"INSERT INTO shop.orders (id, state) VALUES (9, 'c') RETURNING old.*, new.*",
		"DELETE FROM shop.orders WHERE id = 1 RETURNING old.*, new.*",
		"UPDATE app.ov SET state = 'u' WHERE id = 1 RETURNING old.*, new.*",
		"MERGE INTO shop.orders o USING (VALUES (1)) v(id) ON o.id = v.id WHEN MATCHED THEN UPDATE SET state = 'm' RETURNING old.*, new.*",
		"UPDATE shop.events SET account = 150 WHERE id = 1 RETURNING old.tableoid::regclass, new.tableoid::regclass",
	} {
		err := attempt(ctx, f.app, []string{"order:5", "acct:150"}, []string{q}, true)
		expectErr(t, q, err, fencegate.CodeUnfenced)
	}
	f.unchanged(t, before)
}

// TestVersionsVirtualGeneratedColumns: PostgreSQL 18's virtual generated
// columns are computed when read. A resource expression that reads one
// would make a row's resource depend on an expression that can change
// after protect ran (ALTER COLUMN ... SET EXPRESSION, 17, rewrites nothing
// for a virtual column); PostgreSQL refuses it, since a generated column
// may not reference another, and so does protect, whatever the form. A
// protected table may have virtual columns: its writes are checked as
// every other, and its owner (not a member of the owner role) cannot
// change either generated column under the DDL guard.
func TestVersionsVirtualGeneratedColumns(t *testing.T) {
	testutil.NeedMajor(t, 18, "virtual generated columns")
	db := pgfencetest.New(t, pgfencetest.Options{GuardDDL: true})
	admin := db.Admin(t)
	ctx := context.Background()
	data := pgfencetest.Role(t, db.DSN, "fg_data_", "NOLOGIN")
	mustExec(t, admin, fmt.Sprintf(`CREATE SCHEMA v AUTHORIZATION %[1]s; SET ROLE %[1]s;
		CREATE TABLE v.t (id int PRIMARY KEY, k text, vk text GENERATED ALWAYS AS ('v:' || k) VIRTUAL);
		INSERT INTO v.t VALUES (1, 'a'), (2, 'b'); RESET ROLE;
		GRANT USAGE ON SCHEMA v TO %[2]s; GRANT SELECT, INSERT, UPDATE, DELETE ON v.t TO %[2]s`, data, db.App))
	for _, expr := range []string{"vk", "'x' || vk", "coalesce(vk, k)", "CASE WHEN id > 0 THEN vk END"} {
		err := pgfence.Protect(ctx, admin, "v.t", expr)
		if err == nil {
			t.Fatalf("protect v.t with %s, reading a virtual generated column: accepted", expr)
		}
	}
	if err := pgfence.Protect(ctx, admin, "v.t", "'v:' || id"); err != nil {
		t.Fatal(err)
	}
	var gen string
	if err := admin.QueryRow(ctx, "SELECT attgenerated::text FROM pg_attribute WHERE attrelid = 'v.t'::regclass AND attname = 'fencegate_resource'").Scan(&gen); err != nil || gen != "s" {
		t.Fatalf("fencegate_resource attgenerated = %q, %v; want s (stored)", gen, err)
	}
	app := db.AppConn(t)
	for _, q := range []string{
		"INSERT INTO v.t (id, k) VALUES (3, 'c')",
		"UPDATE v.t SET k = 'z' WHERE id = 1",
		"DELETE FROM v.t WHERE id = 2",
	} {
		err := attempt(ctx, app, nil, []string{q}, true)
		expectErr(t, q, err, fencegate.CodeUnfenced)
	}
	if err := attempt(ctx, app, []string{"v:1"}, []string{"UPDATE v.t SET k = 'z' WHERE id = 1"}, false); err != nil {
		t.Fatalf("a fenced update of a table with a virtual column: %v", err)
	}
	owner := pgx.Identifier{data}.Sanitize()
	for _, q := range []string{
		"ALTER TABLE v.t ALTER COLUMN vk SET EXPRESSION AS ('w:' || k)",
		"ALTER TABLE v.t ALTER COLUMN fencegate_resource SET EXPRESSION AS ('w:' || k)",
		"ALTER TABLE v.t ALTER COLUMN fencegate_resource DROP EXPRESSION",
		"ALTER TABLE v.t ADD COLUMN w text GENERATED ALWAYS AS ('x') VIRTUAL",
	} {
		err := script(admin, "BEGIN", "SET LOCAL ROLE "+owner, q, "COMMIT")
		_ = script(admin, "ROLLBACK")
		expectErr(t, q+" by the table's owner under the DDL guard", err, fencegate.CodeProtectedDDL)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("HealthQuery = %q", got)
	}
}

// TestVersionsTemporalConstraints: PostgreSQL 18's temporal keys (WITHOUT
// OVERLAPS) and PERIOD foreign keys on protected tables. A PERIOD foreign
// key allows no cascading action, so it writes nothing; the writes to both
// tables are checked, and protect handles the tables as any other.
func TestVersionsTemporalConstraints(t *testing.T) {
	testutil.NeedMajor(t, 18, "temporal constraints")
	f := newFixture(t)
	ctx := context.Background()
	mustExec(t, f.admin, fmt.Sprintf(`SET ROLE %[1]s;
		CREATE TABLE shop.rooms (room int4range, valid daterange, PRIMARY KEY (room, valid WITHOUT OVERLAPS));
		CREATE TABLE shop.bookings (id int4range, room int4range, valid daterange, PRIMARY KEY (id, valid WITHOUT OVERLAPS),
			FOREIGN KEY (room, PERIOD valid) REFERENCES shop.rooms (room, PERIOD valid));
		INSERT INTO shop.rooms VALUES ('[1,2)', '[2024-01-01,2025-01-01)');
		INSERT INTO shop.bookings VALUES ('[1,2)', '[1,2)', '[2024-02-01,2024-03-01)');
		RESET ROLE; GRANT SELECT, INSERT, UPDATE, DELETE ON shop.rooms, shop.bookings TO %[2]s`, f.data, f.db.App))
	if err := script(f.admin, fmt.Sprintf(`SET ROLE %s; CREATE TABLE shop.bookings2 (room int4range, valid daterange,
			FOREIGN KEY (room, PERIOD valid) REFERENCES shop.rooms (room, PERIOD valid) ON DELETE CASCADE)`, f.data)); err == nil {
		t.Errorf("PostgreSQL 18 accepted ON DELETE CASCADE on a PERIOD foreign key: write a cascade route for it")
	}
	_ = script(f.admin, "RESET ROLE")
	mustExec(t, f.admin, `SELECT fencegate.protect('shop.rooms', $$'room:' || lower(room)$$);
		SELECT fencegate.protect('shop.bookings', $$'room:' || lower(room)$$)`)
	rows := func() string {
		var s string
		if err := f.admin.QueryRow(ctx, "SELECT (SELECT string_agg(r::text, ';' ORDER BY r::text) FROM shop.rooms r) || '|' || (SELECT string_agg(b::text, ';' ORDER BY b::text) FROM shop.bookings b)").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := rows()
	for _, q := range []string{
		"UPDATE shop.bookings SET valid = '[2024-02-01,2024-04-01)'",
		"UPDATE shop.rooms SET valid = '[2024-01-01,2025-06-01)'",
		"INSERT INTO shop.rooms VALUES ('[1,2)', '[2025-01-01,2026-01-01)')",
		"DELETE FROM shop.bookings",
	} {
		err := attempt(ctx, f.app, []string{"room:2"}, []string{q}, true)
		expectErr(t, q, err, fencegate.CodeUnfenced)
	}
	if after := rows(); after != before {
		t.Fatalf("rows changed: %s -> %s", before, after)
	}
	if err := attempt(ctx, f.app, []string{"room:1"}, []string{"UPDATE shop.bookings SET valid = '[2024-02-01,2024-04-01)'"}, false); err != nil {
		t.Fatalf("a fenced update of a temporal table: %v", err)
	}
}

// TestVersionsNotNullConstraints: PostgreSQL 18 keeps NOT NULL constraints
// in pg_constraint, with names, NOT VALID and NO INHERIT. Planted on the
// marks or the audit (only their owner or a superuser can), they would
// make set_mark or the fence fail; HealthQuery names them and Install
// removes them, keeping the marks.
func TestVersionsNotNullConstraints(t *testing.T) {
	testutil.NeedMajor(t, 18, "NOT NULL constraints in pg_constraint")
	f := newFixture(t)
	ctx := context.Background()
	mustExec(t, f.admin, "SELECT fencegate.set_mark('order:1', 7, 'test')")
	marks := f.marksSnapshot(t)
	mustExec(t, f.admin, `ALTER TABLE fencegate.marks ADD CONSTRAINT planted_nn NOT NULL holder_xid NOT VALID;
		ALTER TABLE fencegate.audit ADD CONSTRAINT planted_nn2 NOT NULL reason NO INHERIT`)
	joined := strings.Join(health(t, f.admin), "\n")
	for _, c := range []string{"planted_nn", "planted_nn2"} {
		if !strings.Contains(joined, "constraint "+c+" ") {
			t.Errorf("HealthQuery = %q, want constraint %s named", joined, c)
		}
	}
	// The constraint is the problem, and upgrade removes it: the column
	// it sits on is not reported as planted (whose repair would refuse).
	for _, col := range []string{"column holder_xid", "column reason"} {
		if strings.Contains(joined, col) {
			t.Errorf("HealthQuery = %q, reports %s for a planted constraint on it", joined, col)
		}
	}
	if _, err := pgfence.Install(ctx, f.admin, pgfence.InstallOptions{OwnerRole: f.db.Owner}); err != nil {
		t.Fatal(err)
	}
	if got := health(t, f.admin); len(got) != 0 {
		t.Fatalf("HealthQuery after Install = %q", got)
	}
	if got := f.marksSnapshot(t); got != marks {
		t.Fatalf("marks after Install = %q, want %q", got, marks)
	}
	mustExec(t, f.admin, "SELECT fencegate.set_mark('order:1', 8, '')")
	if err := attempt(ctx, f.app, []string{"order:2"}, []string{"UPDATE shop.orders SET state = 'ok' WHERE id = 2"}, false); err != nil {
		t.Fatalf("a fenced update after the repair: %v", err)
	}
}

// TestVersionsGetACL: PostgreSQL 18's pg_get_acl shows an object's ACL to
// anyone, fencegate.signing_keys' included: the ACL, never the rows.
func TestVersionsGetACL(t *testing.T) {
	testutil.NeedMajor(t, 18, "pg_get_acl")
	f := newFixture(t)
	var acl string
	if err := f.app.QueryRow(context.Background(), "SELECT coalesce(pg_get_acl('pg_class'::regclass, 'fencegate.signing_keys'::regclass, 0)::text, '')").Scan(&acl); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(acl, f.db.App) {
		t.Fatalf("signing_keys' ACL names the application role: %s", acl)
	}
	err := script(f.app, "SELECT * FROM fencegate.signing_keys")
	expectErr(t, "SELECT from fencegate.signing_keys", err, "42501")
}

// TestVersionsMembershipOptions: PostgreSQL 16 splits a membership into
// ADMIN, INHERIT and SET options, and a CREATEROLE role holds ADMIN only
// over the roles it created. PrivilegeQuery walks memberships with
// pg_has_role(..., 'MEMBER'), which counts every membership whatever its
// options. That is required for SET TRUE (SET ROLE to the owner role),
// INHERIT TRUE (its rights without SET ROLE) and ADMIN TRUE (a role may
// grant itself the role it administers, SET included); it refuses, more
// than needed, a membership with all three false, which gives nothing. A
// CREATEROLE role can no longer grant itself the owner role nor alter it
// (the gate still refuses it: on 14 and 15 it can).
func TestVersionsMembershipOptions(t *testing.T) {
	testutil.NeedMajor(t, 16, "GRANT ... WITH INHERIT/SET")
	f := newFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		opts string
		acts bool // can act as the owner role
	}{
		{"INHERIT FALSE, SET TRUE", true},
		{"INHERIT TRUE, SET FALSE", true},
		{"ADMIN TRUE, INHERIT FALSE, SET FALSE", true},
		{"INHERIT FALSE, SET FALSE", false},
	} {
		t.Run(tc.opts, func(t *testing.T) {
			r := pgfencetest.Role(t, f.db.DSN, "fg_memb_", "LOGIN")
			mustExec(t, f.admin, fmt.Sprintf("GRANT %s TO %s WITH %s", pgx.Identifier{f.db.Owner}.Sanitize(), r, tc.opts))
			if got := reasons(t, f.db.DSN, r); !strings.Contains(strings.Join(got, "\n"), "which owns table fencegate.marks") {
				t.Errorf("PrivilegeQuery as a member WITH %s = %q, want it refused as a member of %s", tc.opts, got, f.db.Owner)
			}
			c, err := f.roleConn(t, r)
			if err != nil {
				t.Fatal(err)
			}
			owner := pgx.Identifier{f.db.Owner}.Sanitize()
			_ = script(c, "GRANT "+owner+" TO CURRENT_USER WITH SET TRUE")
			_ = script(c, "SET ROLE "+owner)
			err = script(c, "UPDATE fencegate.marks SET token = 0")
			if tc.acts && err != nil {
				t.Errorf("a member WITH %s could not write the marks (%v): the test no longer shows why it is refused", tc.opts, err)
			}
			if !tc.acts && err == nil {
				t.Errorf("a member WITH %s wrote the marks", tc.opts)
			}
		})
	}
	cr := pgfencetest.Role(t, f.db.DSN, "fg_cr_", "LOGIN CREATEROLE")
	if got := reasons(t, f.db.DSN, cr); !strings.Contains(strings.Join(got, "\n"), "has CREATEROLE") {
		t.Errorf("PrivilegeQuery as a CREATEROLE role = %q", got)
	}
	c, err := f.roleConn(t, cr)
	if err != nil {
		t.Fatal(err)
	}
	owner := pgx.Identifier{f.db.Owner}.Sanitize()
	data := pgx.Identifier{f.data}.Sanitize()
	for _, q := range []string{
		"GRANT " + owner + " TO CURRENT_USER",
		"ALTER ROLE " + owner + " LOGIN PASSWORD 'x'",
		"GRANT " + data + " TO CURRENT_USER",
		"ALTER ROLE " + data + " LOGIN",
		"GRANT pg_write_all_data TO CURRENT_USER",
		"CREATE ROLE fg_cr_child_" + strings.TrimPrefix(cr, "fg_cr_") + " IN ROLE " + owner,
	} {
		if err := script(c, q); err == nil {
			t.Errorf("a CREATEROLE role on PostgreSQL 16+ ran %s", q)
		}
	}
	var n int
	if err := f.admin.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname = $1 AND rolcanlogin", f.db.Owner).Scan(&n); err != nil || n != 0 {
		t.Fatalf("owner role can log in: %d, %v", n, err)
	}
}

// TestVersionsPredefinedRoles: predefined roles PostgreSQL 16 to 18 added
// that reach no table: pg_use_reserved_connections (16),
// pg_create_subscription (16: a subscription's apply worker writes as the
// tables' owners, or as the subscription's, and fires the checks;
// TestApplyWorker runs on every major), pg_signal_autovacuum_worker (18).
// Their members read no key and write no mark, so the gate admits them.
func TestVersionsPredefinedRoles(t *testing.T) {
	testutil.NeedMajor(t, 16, "pg_create_subscription and pg_use_reserved_connections")
	f := newFixture(t)
	ctx := context.Background()
	roles := []string{"pg_use_reserved_connections", "pg_create_subscription"}
	var has bool
	if err := f.admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pg_signal_autovacuum_worker')").Scan(&has); err != nil {
		t.Fatal(err)
	}
	if has {
		roles = append(roles, "pg_signal_autovacuum_worker")
	}
	r := pgfencetest.Role(t, f.db.DSN, "fg_pre_", "LOGIN IN ROLE "+strings.Join(roles, ", ")+", "+f.db.App)
	if got := reasons(t, f.db.DSN, r); len(got) != 0 {
		t.Errorf("PrivilegeQuery as a member of %v = %q", roles, got)
	}
	c, err := f.roleConn(t, r)
	if err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t)
	mustExec(t, f.admin, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", pgx.Identifier{dbName(t, f.db.DSN)}.Sanitize(), r))
	// A subscription needs a password in its connection string on 16+
	// for a role that is not a superuser; none is given here, so it is
	// refused before it connects.
	err = script(c, "CREATE SUBSCRIPTION fg_sub CONNECTION 'host=127.0.0.1 dbname=postgres' PUBLICATION p WITH (connect = false)")
	if err == nil {
		_ = script(f.admin, "ALTER SUBSCRIPTION fg_sub SET (slot_name = NONE); DROP SUBSCRIPTION fg_sub")
	}
	for _, q := range []string{
		"UPDATE fencegate.marks SET token = 0",
		"SELECT * FROM fencegate.signing_keys",
		"BEGIN; LOCK TABLE fencegate.marks IN ACCESS EXCLUSIVE MODE; COMMIT",
	} {
		if err := script(c, q); err == nil {
			t.Errorf("a member of %v ran %s", roles, q)
		}
		_ = script(c, "ROLLBACK")
	}
	f.unchanged(t, before)
}
