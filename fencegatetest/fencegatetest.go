// Package fencegatetest starts, in one call inside a test process, the
// fenced path a program that takes locks with package lockclient runs
// against: a token service cluster (package tokenservicetest), a fresh
// PostgreSQL database with schema fencegate (package pgfencetest), a
// fencegate proxy in front of it (package proxytest), and a lock client on
// Redis that takes its fencing tokens from the cluster. Everything is
// stopped or dropped when the test ends.
//
// It is not a stable API, as hashicorp/raft's MakeCluster is not: it
// serves this module's tests first and may change in any release.
package fencegatetest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// Stack is a running fenced path for one test.
type Stack struct {
	// Tokens is the token service cluster, of three nodes.
	Tokens *tokenservicetest.Cluster
	// DB is the database, with schema fencegate installed and no tables:
	// the test creates, protects and grants its own through DB.DSN.
	DB *pgfencetest.DB
	// ProxyDSN connects to the database as its application role
	// (DB.App) through the proxy.
	ProxyDSN string
	// Locks takes locks whose tokens come from Tokens.
	Locks *lockclient.Client
}

// Start starts a Stack for t, with its locks on the Redis servers at
// redisAddrs (as lockclient.Dial takes them: one for a single node,
// several independent masters for Redlock), under a key prefix of the
// test's own so that tests can share a Redis. opts apply to the lock client
// after Start's own (the key prefix and the test's log). Start fails the
// test when any part cannot start.
func Start(t testing.TB, redisAddrs []string, opts ...lockclient.Option) *Stack {
	t.Helper()
	testutil.NeedServices(t)
	s := &Stack{Tokens: tokenservicetest.StartCluster(t, 3), DB: pgfencetest.New(t)}
	s.ProxyDSN = proxytest.Start(t, s.DB.AppDSN)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	base := []lockclient.Option{
		lockclient.WithKeyPrefix("fencegatetest:" + hex.EncodeToString(b) + ":"),
		lockclient.WithLogger(testutil.Logger(t).With("component", "lockclient")),
	}
	locks, err := lockclient.Dial(redisAddrs, s.Tokens.Client(t), append(base, opts...)...)
	if err != nil {
		t.Fatalf("fencegatetest: %v", err)
	}
	t.Cleanup(func() { locks.Close() })
	s.Locks = locks
	return s
}
