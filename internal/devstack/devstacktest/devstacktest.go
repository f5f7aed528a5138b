// Package devstacktest starts the fencegate dev stack for tests: the token
// cluster and the proxy in the test process on free ports, over the test
// PostgreSQL and Redis (see testutil).
package devstacktest

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/internal/devstack"
	"github.com/fencegate/fencegate/internal/testutil"
)

// Start brings the stack up and stops it when the test ends. redisAddr is
// the Redis to report (usually from testutil.Redis).
func Start(t testing.TB, redisAddr string) *devstack.Stack {
	t.Helper()
	free := func() []string {
		return []string{testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)}
	}
	st, err := devstack.Start(context.Background(), devstack.StackConfig{
		DataDir:     filepath.Join(t.TempDir(), "dev"),
		Postgres:    testutil.PostgresAdminDSN(),
		Redis:       redisAddr,
		ProxyListen: testutil.FreeAddr(t),
		TokenAPI:    free(),
		TokenRaft:   free(),
		Logger:      testutil.Logger(t),
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
