// Package tokenservicetest starts a token service cluster inside a test
// process, for the tests of programs that take fencing tokens: real nodes
// (Raft, bbolt with fsync, the HTTP API) on 127.0.0.1, each on listeners
// bound to port 0, with temporary data directories, stopped and removed
// when the test ends.
//
// It is not a stable API, as hashicorp/raft's MakeCluster is not: it
// serves this module's tests first and may change in any release.
package tokenservicetest

import (
	"log/slog"
	"testing"

	"github.com/fencegate/fencegate/internal/tokentest"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// Cluster is a running in-process token service cluster.
type Cluster struct{ c *tokentest.Cluster }

// Option configures StartCluster.
type Option = tokentest.Option

// WithConfig lets the test adjust node i's Config before it starts, and
// before every restart. The defaults are tight Raft timeouts for fast
// tests: heartbeat and election 200ms, leader lease 150ms, transport and
// forwarding timeouts 2s.
func WithConfig(f func(i int, cfg *tokenservice.Config)) Option { return tokentest.WithConfig(f) }

// WithLogger sends the nodes' logs to l. The default is the test's log,
// silenced once the test has ended.
func WithLogger(l *slog.Logger) Option { return tokentest.WithLogger(l) }

// StartCluster starts n nodes of a new cluster (3 for a cluster that
// survives the loss of one node), waits until a majority agrees on a
// leader, and stops them all when the test ends.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	return &Cluster{c: tokentest.StartCluster(t, n, opts...)}
}

// Len returns the number of nodes, stopped ones included.
func (c *Cluster) Len() int { return c.c.Len() }

// APIURLs returns the API base URL of every node, the servers a
// tokenclient.Client is given.
func (c *Cluster) APIURLs() []string { return c.c.APIURLs() }

// Client returns a client of every node, closed when the test ends.
func (c *Cluster) Client(t testing.TB, opts ...tokenclient.ClientOption) *tokenclient.Client {
	t.Helper()
	return c.c.Client(t, opts...)
}

// Leader waits (up to 20s) until a majority of the running nodes agree on
// a leader and returns its index.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	return c.c.Leader(t)
}

// Node returns node i's server, or nil while it is stopped.
func (c *Cluster) Node(i int) *tokenservice.Server { return c.c.Node(i) }

// Kill stops node i abruptly: no snapshot, no leadership transfer, as a
// crash would.
func (c *Cluster) Kill(i int) { c.c.Kill(i) }

// Restart starts node i again from its data directory and on its
// addresses (killing it first if it runs); it rejoins by itself.
func (c *Cluster) Restart(i int) { c.c.Restart(i) }

// Cut cuts node i off from every other node, both ways, with TCP black
// holes (clients still reach it); Heal ends it.
func (c *Cluster) Cut(i int) { c.c.Cut(i) }

// Heal ends Cut(i).
func (c *Cluster) Heal(i int) { c.c.Heal(i) }
