// Package freeport hands out free loopback ports, never the same port twice
// in one process. A port found free by listening on it and closing it is not
// held, and the kernel gives a just-closed port to the next listen on :0; so
// without one record per process, two servers started together (the nodes
// of a token cluster) could be given the same port.
package freeport

import (
	"fmt"
	"net"
	"sync"
)

var handedOut sync.Map

// Claim records port as handed out and reports whether it was not before.
func Claim(port int) bool {
	_, taken := handedOut.LoadOrStore(port, true)
	return !taken
}

// Loopback returns n distinct "127.0.0.1:PORT" addresses that were free a
// moment ago and that no earlier call in this process returned.
func Loopback(n int) ([]string, error) {
	var out []string
	// Hold every listener until all are chosen, so no port is picked twice.
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
