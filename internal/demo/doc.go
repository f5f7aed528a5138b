// Package demo replays Kleppmann's paused lock holder with real processes:
// two client processes charge one order under a Redis lock that carries a
// fencing token from the Raft token service; the first client is frozen with
// SIGSTOP past its lock's TTL while the second takes the lock and charges,
// then the first wakes up and writes from its stale view.
//
// The scenario runs twice: (a) the clients write straight to PostgreSQL and
// the order is charged twice; (b) they write through the fencegate proxy and
// the stale write fails with SQLSTATE FG001, so the order is charged once.
// With Redlock, the lock lives on five Redis masters and the double grant
// comes from a master restarted without persistence instead of from a pause.
//
// The clients are the fencegate binary itself, re-executed with the hidden
// command "fencegate demo client", so that a pause is a real SIGSTOP of a
// real process whose lease runs out in Redis while it cannot run.
package demo

import "errors"

var (
	// ErrStaleWriteAccepted means the fenced run let the stale write through:
	// the demo failed to show what it exists to show.
	ErrStaleWriteAccepted = errors.New("demo: the stale write was not rejected through the proxy")
	// ErrClient means a client process failed in a way the scenario does not expect.
	ErrClient = errors.New("demo: client failed")
)
