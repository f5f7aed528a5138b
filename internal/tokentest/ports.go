package tokentest

import (
	"testing"

	"github.com/fencegate/fencegate/internal/freeport"
)

// StableAddr returns "127.0.0.1:PORT" for a free port that a node run as a
// child process may be killed and restarted on: outside the kernel's
// ephemeral range, so no outgoing connection takes it while the node is
// down, and never handed out twice in one process (see package freeport).
// Nodes in the test's own process take listeners instead (StartCluster
// binds 127.0.0.1:0 and hands them over).
func StableAddr(t testing.TB) string {
	t.Helper()
	addrs, err := freeport.Loopback(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}
