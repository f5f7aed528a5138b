package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestRangeFor(t *testing.T) {
	for _, c := range []struct {
		ephemeral, pid, lo, hi int
		ok                     bool
	}{
		{32768, 0, 10000, 12846, true},
		{32768, 7, 29922, 32768, true},
		{32768, 9, 12846, 15692, true}, // pid 9 shares pid 1's eighth
		{10500, 3, 0, 0, false},        // no room below the ephemeral range
	} {
		lo, hi, ok := rangeFor(c.ephemeral, c.pid)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("rangeFor(%d, %d) = %d, %d, %v; want %d, %d, %v", c.ephemeral, c.pid, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

func TestLoopbackDistinctAndInRange(t *testing.T) {
	if testing.Short() {
		t.Skip("opens loopback listeners: not in -short")
	}
	lo, hi, ok := Range()
	seen := map[string]bool{}
	for range 20 {
		addrs, err := Loopback(3)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s handed out twice", a)
			}
			seen[a] = true
			_, p, _ := net.SplitHostPort(a)
			port, _ := strconv.Atoi(p)
			if ok && (port < lo || port >= hi) {
				t.Errorf("%s outside this process's range %d..%d", a, lo, hi)
			}
			// Free a moment ago: it can be listened on now.
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("listen on handed-out %s: %v", a, err)
			}
			l.Close()
		}
	}
}

func TestInRangeSkipsTakenPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("opens loopback listeners: not in -short")
	}
	// A small range of which the test holds every port but one: the scan
	// must find that one, wherever it starts.
	const lo, hi = 23000, 23020
	var held []net.Listener
	free := -1
	for p := lo; p < hi; p++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken already
		}
		if free < 0 {
			free = p
			l.Close()
			continue
		}
		held = append(held, l)
	}
	defer func() {
		for p := lo; p < hi; p++ {
			handedOut.Delete(p) // let later calls use the range again
		}
		for _, l := range held {
			l.Close()
		}
	}()
	if free < 0 {
		t.Fatalf("every port from %d to %d is taken on this machine; pick another range for this test", lo, hi)
	}
	for range 3 { // different random starts
		addrs, err := inRange(lo, hi, 1)
		if err != nil {
			t.Fatal(err)
		}
		if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(free)); addrs[0] != want {
			t.Fatalf("inRange = %s, want the one free port %s", addrs[0], want)
		}
		handedOut.Delete(free)
	}
	handedOut.Delete(free)
	for p := lo; p < hi; p++ {
		handedOut.Store(p, true)
	}
	if _, err := inRange(lo, hi, 1); err == nil {
		t.Error("inRange found a port in a range whose every port was handed out")
	}
}
