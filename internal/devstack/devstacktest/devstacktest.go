// Package devstacktest starts the fencegate dev stack for tests: the token
// cluster and the proxy in the test process on free ports, over the test
// PostgreSQL and Redis (see testutil). The database the stack sets up and its
// two roles are the test's own (unique names), dropped when the test ends.
package devstacktest

import (
	"context"
	"net/url"
	"testing"

	"github.com/fencegate/fencegate/internal/devstack"
	"github.com/fencegate/fencegate/internal/testutil"
)

// Start brings the stack up and stops it when the test ends. redisAddr is
// the Redis to report (usually from testutil.Redis). The stack is a
// throwaway one (devstack.StartThrowaway): its database (Stack.DB:
// schema fencegate, the protected demo tables) and its owner and
// application roles have unique names and are dropped when the test ends;
// the defaults (fencegate_dev, fencegate_owner, fencegate_app) would
// outlive the test on a shared server.
func Start(t testing.TB, redisAddr string) *devstack.Stack {
	t.Helper()
	testutil.NeedServices(t)
	st, err := devstack.StartThrowaway(context.Background(), devstack.ThrowawayConfig{
		Prefix:   "fg_dev_",
		Postgres: testutil.PostgresAdminDSN(),
		Redis:    redisAddr,
		Logger:   testutil.Logger(t),
	})
	if err != nil {
		t.Fatalf("start dev stack: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("stop dev stack: %v", err)
		}
	})
	return st
}

// ProxyDSN returns dsn (a database on the test PostgreSQL, e.g. from
// testutil.PostgresDB) pointed at the stack's proxy instead.
func ProxyDSN(st *devstack.Stack, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Host = st.ProxyAddr
	return u.String()
}
