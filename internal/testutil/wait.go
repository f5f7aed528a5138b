package testutil

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/poll"
)

// WaitFor polls cond every 10ms until it returns nil or timeout passes, and
// then fails the test with what and the last error cond returned (see
// package poll).
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := poll.Until(context.Background(), what, 10*time.Millisecond, timeout, func(context.Context) error { return cond() }); err != nil {
		t.Fatal(err)
	}
}

// Eventually is WaitFor with a boolean condition.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll.True(context.Background(), what, 10*time.Millisecond, timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no earlier call in this process returned (see package freeport).
func FreePort(t testing.TB) int {
	t.Helper()
	NeedServices(t)
	ports, err := freeport.Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// FreeAddr returns "127.0.0.1:PORT" for a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
