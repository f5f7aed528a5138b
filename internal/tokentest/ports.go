package tokentest

import (
	"testing"

	"github.com/fencegate/fencegate/internal/freeport"
)

// StableAddr returns "127.0.0.1:PORT" for a free port that a node may be
// killed and restarted on: outside the kernel's ephemeral range, so no
// outgoing connection takes it while the node is down, and never handed out
// twice in one process (see package freeport).
func StableAddr(t testing.TB) string {
	t.Helper()
	addrs, err := freeport.Loopback(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}
