package testutil

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
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

// closedNext is where ClosedAddr looks next, among the ports below 1024.
var closedNext atomic.Int32

// ClosedAddr returns "127.0.0.1:PORT" for a port that refuses connections
// and stays so: a port below 1024 where nothing listens now. A port that
// was merely free a moment ago (FreeAddr) can be handed to any listener
// that binds port 0 next, anywhere on the machine, and a test expecting a
// refusal then waits for an answer that never comes; nothing here binds a
// port below 1024 (the kernel never hands them out for port 0). Successive
// calls return distinct ports.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	NeedServices(t)
	for range 1023 {
		port := int(closedNext.Add(1)-1)%1023 + 1
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return addr
		}
	}
	t.Fatal("testutil: no port below 1024 refuses connections on 127.0.0.1")
	return ""
}
