package testutil

import "testing"

// NeedServices skips the test under -short. Every helper here that reaches
// PostgreSQL or Redis, starts a server or opens a loopback listener calls
// it, and so do tests that open listeners of their own: `go test -short`
// runs only the tests that need no service and no network. Without -short a
// missing service still fails the test.
func NeedServices(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL, Redis or loopback sockets: not in -short")
	}
}
