// Package freeport hands out free loopback ports for servers that a test or
// the fault harness starts as child processes, and may restart on the same
// port.
//
// A port found free by listening on it and closing it is not held until the
// child listens, so three things can take it in between, and each was seen:
//
//   - the same process: the kernel gives a just-closed port to the next
//     listen on :0, so two nodes of one cluster could get the same port. One
//     record per process (Claim) prevents it.
//   - any process's outgoing connection: ports from the kernel's ephemeral
//     range (what :0 gives) are also the local ends of outgoing connections,
//     so a node that starts, or restarts after a kill, finds its port taken
//     ("address in use"). Ports are therefore drawn from below that range.
//   - another test binary doing the same: each process draws from its own
//     eighth of that range (by process id), at random, so two binaries
//     running side by side rarely meet.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

var handedOut sync.Map

// Claim records port as handed out and reports whether it was not before.
func Claim(port int) bool {
	_, taken := handedOut.LoadOrStore(port, true)
	return !taken
}

// lowest is the first port handed out; below it sit well-known services.
const lowest = 10000

// Range returns the ports this process draws from: its eighth of the ports
// between 10000 and the start of the kernel's ephemeral range. ok is false
// when that range leaves too little room (an ephemeral range that starts
// below 11000).
func Range() (lo, hi int, ok bool) {
	return rangeFor(ephemeralStart(), os.Getpid())
}

func rangeFor(ephemeral, pid int) (lo, hi int, ok bool) {
	if ephemeral-lowest < 1000 {
		return 0, 0, false
	}
	span := (ephemeral - lowest) / 8
	lo = lowest + pid%8*span
	return lo, lo + span, true
}

// ephemeralStart reads the first port of the kernel's ephemeral range,
// 32768 (Linux's default) when it cannot be read.
func ephemeralStart() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				return v
			}
		}
	}
	return 32768
}

// Loopback returns n distinct "127.0.0.1:PORT" addresses that were free a
// moment ago and that no earlier call in this process returned, drawn from
// Range: a scan from a random port, so each port is tried at most once.
// When the ephemeral range leaves no room below it, the ports come from
// listening on :0 instead.
func Loopback(n int) ([]string, error) {
	lo, hi, ok := Range()
	if !ok {
		return kernelPorts(n)
	}
	return inRange(lo, hi, n)
}

// Ports is Loopback with the port numbers alone.
func Ports(n int) ([]int, error) {
	addrs, err := Loopback(n)
	if err != nil {
		return nil, err
	}
	ports := make([]int, n)
	for i, a := range addrs {
		_, p, _ := net.SplitHostPort(a)
		ports[i], _ = strconv.Atoi(p) // Loopback formats 127.0.0.1:PORT itself
	}
	return ports, nil
}

// inRange is Loopback with ports from lo up to hi (exclusive).
func inRange(lo, hi, n int) ([]string, error) {
	var out []string
	span, start := hi-lo, rand.IntN(hi-lo)
	for i := 0; i < span && len(out) < n; i++ {
		port := lo + (start+i)%span
		if !Claim(port) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken by another process; it stays claimed
		}
		// Hold every listener until all are chosen.
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	if len(out) < n {
		return nil, fmt.Errorf("find free port: fewer than %d free loopback ports left between %d and %d", n, lo, hi)
	}
	return out, nil
}

// kernelPorts is Loopback with ports the kernel picks (listening on :0).
func kernelPorts(n int) ([]string, error) {
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("find free port: no port unused by this process after %d tries", tries)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		defer l.Close()
		if Claim(l.Addr().(*net.TCPAddr).Port) {
			out = append(out, l.Addr().String())
		}
	}
	return out, nil
}
