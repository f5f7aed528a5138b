package proxy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
)

// Attacks on the gate that PostgreSQL 16, 17 and 18 opened: each test
// needs the major its route appeared in and skips, saying so, on an older
// server (the version matrix runs them on every major).

// TestGateRefusesMaintainRoles: a member of PostgreSQL 17's pg_maintain,
// directly or through a role it belongs to (NOINHERIT too: SET ROLE needs
// only membership), holds MAINTAIN on every relation and can LOCK
// fencegate.marks IN ACCESS EXCLUSIVE MODE: every fence of the database
// then waits and fails with FG004, and the gate's check of the schema
// waits with it. The gate refuses it (before the fix it was admitted).
// MAINTAIN granted on an object of schema fencegate is a widened grant:
// every session is refused with FG005 until Install revokes it.
func TestGateRefusesMaintainRoles(t *testing.T) {
	testutil.NeedMajor(t, 17, "pg_maintain")
	db := pgfencetest.New(t)
	proxied := proxytest.Start(t, db.AppDSN, proxytest.WithConfig(func(c *proxy.Config) { c.CheckInterval = -1 }))
	maint := pgfencetest.Role(t, db.DSN, "fg_maint_", "LOGIN IN ROLE pg_maintain, "+db.App)
	group := pgfencetest.Role(t, db.DSN, "fg_maintg_", "NOLOGIN IN ROLE pg_maintain")
	member := pgfencetest.Role(t, db.DSN, "fg_maintm_", "LOGIN NOINHERIT IN ROLE "+group+", "+db.App)
	for _, user := range []string{maint, member} {
		pe := refusedWith(t, asUser(t, proxied, user, ""), fencegate.CodePrivilegedRole)
		if !strings.Contains(pe.Message, "pg_maintain") {
			t.Errorf("message %q does not name pg_maintain", pe.Message)
		}
	}
	// The application role itself is still admitted.
	c := connect(t, proxied)
	c.Close(context.Background())

	execAdmin(t, db.DSN, "GRANT MAINTAIN ON fencegate.marks TO "+db.App)
	pe := refusedWith(t, proxied, fencegate.CodeSchemaInvalid)
	if !strings.Contains(pe.Message, "MAINTAIN on fencegate.marks") {
		t.Errorf("message %q does not name the MAINTAIN grant", pe.Message)
	}
	admin := connect(t, db.DSN)
	defer admin.Close(context.Background())
	if _, err := pgfence.Install(context.Background(), admin, pgfence.InstallOptions{OwnerRole: db.Owner}); err != nil {
		t.Fatal(err)
	}
	c = connect(t, proxied)
	c.Close(context.Background())
}
