package testutil

import (
	"net"
	"sync"
	"testing"
)

// Serve listens on a free loopback port and runs handle, in a goroutine of
// its own, for every connection it accepts. It returns the address. When
// the test ends the listener and every accepted connection are closed.
func Serve(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	NeedServices(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go handle(c)
		}
	}()
	return ln.Addr().String()
}
