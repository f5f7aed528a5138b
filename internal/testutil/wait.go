package testutil

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// WaitFor polls cond every 10ms until it returns nil or timeout passes, and
// then fails the test with what and the last error cond returned.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Eventually is WaitFor with a boolean condition.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitFor(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("condition still false")
	})
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no earlier call in this process returned: the port is not held, and
// the kernel may give the same one to the next listen on :0 once it is
// closed, so two servers of one test could otherwise get the same port.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, taken := freePorts.LoadOrStore(port, true); !taken {
			return port
		}
	}
	t.Fatal("find free port: every port offered was handed out before")
	return 0
}

// freePorts holds the ports FreePort returned in this process.
var freePorts sync.Map

// FreeAddr returns "127.0.0.1:PORT" for a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
