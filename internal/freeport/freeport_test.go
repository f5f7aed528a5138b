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

func TestLoopbackSkipsTakenPorts(t *testing.T) {
	lo, hi, ok := Range()
	if !ok {
		t.Skip("no room below the ephemeral range on this machine")
	}
	// Take every port of the range this process has not handed out, but
	// one, and check that Loopback finds that one.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
			// Never handed out: let later calls use it again.
			handedOut.Delete(l.Addr().(*net.TCPAddr).Port)
		}
	}()
	free := -1
	for p := lo; p < hi; p++ {
		if _, taken := handedOut.Load(p); taken {
			continue
		}
		if free < 0 {
			free = p
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			held = append(held, l)
		}
	}
	addrs, err := Loopback(1)
	if err != nil {
		t.Fatal(err)
	}
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(free)); addrs[0] != want {
		t.Errorf("Loopback(1) = %s, want the one free port %s", addrs[0], want)
	}
}
