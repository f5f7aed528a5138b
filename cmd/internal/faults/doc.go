// Package faults is fencegate's fault campaign: evidence, in the manner of
// Jepsen, that no stale write is ever accepted.
//
// A run starts the whole stack as real processes on loopback (three token
// nodes whose Raft traffic passes through relays the harness controls, one or
// five Redis masters, two gate proxies, a fresh PostgreSQL database whose
// tables are protected with fencegate.protect) and several workload clients,
// each its own process so that SIGSTOP is real. The clients log in as an
// application role of the run's own, take the lock through lockclient and do
// fenced read-modify-write transactions through the proxies. Meanwhile a nemesis,
// on a seeded schedule, pauses clients past the lock's TTL, pauses the Raft
// leader and Redis masters, kills and restarts token nodes (one, a majority,
// all), Redis masters (which lose their keys) and proxies, partitions the
// Raft nodes, jumps a Redis master's clock past the TTL, stalls a token
// node's fsyncs, and wipes or replaces a token node's data directory (the
// wiped node must refuse to start; both come back through membership).
//
// Every operation lands in a history (JSON lines, one worker.Event per line, with
// timestamps from the machine-wide monotonic clock). The checkers then
// require: (1) tokens strictly increasing in real-time order (porcupine);
// (2) the data invariant, counter = committed increments, without lost
// updates; (3) no trace of any rejected transaction; (4) at least one double
// hold of the lock (otherwise the faults did not bite and the run fails);
// (5) no token asked for after a wipe at or below one handed out before.
// And, the point of it all, no accepted write whose token is below one
// accepted before it.
//
// Of fencegate's three ways to run the whole stack, StartStack is the one to
// crash: every server is a child process of its own, since only a process
// can be killed with SIGKILL, frozen with SIGSTOP, restarted on the same
// port and data directory, or lose its fsyncs. A test's stack
// (fencegatetest) runs in one process and cannot be crashed that way; the
// binary's stack (devstack) is for a developer's machine and the demos.
//
// See DESIGN.md for the choices behind the harness.
package faults

import "errors"

var (
	// ErrUnknownFault is returned for a fault name the nemesis does not know.
	ErrUnknownFault = errors.New("faults: unknown fault")
	// ErrNoLeader is returned when no token node leads.
	ErrNoLeader = errors.New("faults: no token leader")
	// ErrCheckFailed is returned when a run's history violates a checked property.
	ErrCheckFailed = errors.New("faults: check failed")
	// ErrNoDiskThrottle is returned when writes cannot be throttled (no
	// cgroup v1 blkio controller, not root, or no block device).
	ErrNoDiskThrottle = errors.New("faults: cannot throttle disk writes")
	// ErrNoClockShim is returned when the clock shim cannot be built (no C compiler).
	ErrNoClockShim = errors.New("faults: cannot build clock shim")
)
