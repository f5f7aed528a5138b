// Command relay copies bytes between a listener and one upstream address,
// both ways, with no protocol handling: two goroutines per connection on
// net.Conn, 32 KiB buffers, one P. It is the floor any Go proxy on the
// runtime's network poller starts from, measured beside the gate and
// PgBouncer (docs/benchmarks.md, "The proxy"). Usage: relay LISTEN UPSTREAM.
package main

import (
	"net"
	"os"
	"runtime"
)

func pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func main() {
	runtime.GOMAXPROCS(1)
	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		panic(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			panic(err)
		}
		go func() {
			u, err := net.Dial("tcp", os.Args[2])
			if err != nil {
				c.Close()
				return
			}
			go pump(u, c)
			pump(c, u)
		}()
	}
}
