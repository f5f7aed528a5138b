// Package fencegatetest starts, in one call inside a test process, the
// fenced path a program that takes locks with package lockclient runs
// against: a token service cluster (package tokenservicetest), a fresh
// PostgreSQL database with schema fencegate (package pgfencetest), a
// fencegate proxy in front of it (package proxytest), and a lock client on
// Redis that takes its fencing tokens from the cluster. Everything is
// stopped or dropped when the test ends.
//
// Of fencegate's three ways to run the whole stack, this is the one for a
// test: the servers run inside the test's own process, on ports of their
// own, so a test can reach into them (cut a node off, restart it), a
// failure points at the line that caused it, and "go test" runs it with no
// binary to build. "fencegate dev" and the demos run the binary's stack
// (cmd/internal/devstack); the fault campaign runs the stack as child
// processes, the only way to kill, pause and restart them
// (cmd/internal/faults). Package clientsuite starts this stack for the
// Python and Node.js suites, with what they need besides.
//
// It is not a stable API, as hashicorp/raft's MakeCluster is not: it
// serves this module's tests first and may change in any release.
package fencegatetest

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
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
	// Locks takes locks whose tokens come from Tokens; nil from
	// StartServers.
	Locks *lockclient.Client
}

// Option tunes StartServers.
type Option func(*options)

type options struct{ logger *slog.Logger }

// WithLogger gives the logs of the token nodes and the proxy to l. The
// default is the test's log.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// StartServers starts the servers of a Stack for t (the token cluster, the
// database and the proxy) without a lock client: for tests whose clients
// are not Go's, as the Python and Node.js suites (package clientsuite).
func StartServers(t testing.TB, opts ...Option) *Stack {
	t.Helper()
	testutil.NeedServices(t)
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var tokenOpts []tokenservicetest.Option
	var proxyOpts []proxytest.Option
	if o.logger != nil {
		tokenOpts = append(tokenOpts, tokenservicetest.WithLogger(o.logger))
		proxyOpts = append(proxyOpts, proxytest.WithConfig(func(c *proxy.Config) { c.Logger = o.logger.With("component", "proxy") }))
	}
	s := &Stack{Tokens: tokenservicetest.StartCluster(t, 3, tokenOpts...), DB: pgfencetest.New(t)}
	s.ProxyDSN = proxytest.Start(t, s.DB.AppDSN, proxyOpts...)
	return s
}

// Start starts a Stack for t, with its locks on the Redis servers at
// redisAddrs (as lockclient.Dial takes them: one for a single node,
// several independent masters for Redlock), under a key prefix of the
// test's own so that tests can share a Redis. opts apply to the lock client
// after Start's own (the key prefix and the test's log). Start fails the
// test when any part cannot start.
func Start(t testing.TB, redisAddrs []string, opts ...lockclient.Option) *Stack {
	t.Helper()
	s := StartServers(t)
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
