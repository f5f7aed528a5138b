package main

import (
	"os"
	"runtime"
)

// oneProc runs the process's Go code on one thread at a time
// (runtime.GOMAXPROCS(1)) unless the GOMAXPROCS environment variable says
// otherwise, and returns the setting in force and a function that puts the
// previous one back (for a caller in the same process, such as a test).
//
// The proxy and a token node spend their time in system calls and
// wake-ups, a few microseconds of work per message. With a second P, each
// time the network poller readies a goroutine while a P is idle the runtime
// wakes another thread to look for work (a futex pair, context switches,
// spinning) that one thread does not need. Measured on two vCPUs: the proxy
// at 8 pgbench clients, a seventh less CPU per transaction and 40 % fewer
// context switches (proxy/DESIGN.md, "Performance"); a token node at one
// client, 0.62 → 0.46 ms p50 and 609 → 377 µs of the three nodes' CPU per
// token, and at 64 clients 45,000 → 61,000 tokens/s (tokenservice/DESIGN.md,
// "One P"). The process then uses one core for Go code (blocking system
// calls such as fsync still run beside it); set GOMAXPROCS to use more (TLS
// to many clients, or more traffic than one core serves).
func oneProc() (procs int, restore func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0), func() {}
	}
	prev := runtime.GOMAXPROCS(1)
	return 1, func() { runtime.GOMAXPROCS(prev) }
}
