// Package demo replays Kleppmann's paused lock holder with real processes:
// two client processes charge one order under a Redis lock that carries a
// fencing token from the Raft token service; the first client is frozen with
// SIGSTOP past its lock's TTL while the second takes the lock and charges,
// then the first wakes up and writes from its stale view.
//
// The scenario runs three times, the clients logging in as an application
// role (SELECT, INSERT, UPDATE, DELETE on the tables and the fence grants):
// (a) straight to PostgreSQL on unprotected tables, without a fence: the
// order is charged twice; (b) through the fencegate proxy on tables
// protected with fencegate.protect (each row belongs to resource
// 'order:<id>'), each transaction fenced with the lock's token: the stale
// write fails with SQLSTATE FG001 and the order is charged once; (c) as (b)
// but straight to PostgreSQL: refused with FG001 too, because PostgreSQL
// itself enforces the fence. With Redlock, the lock lives on five Redis
// masters and the double grant comes from a master restarted without
// persistence instead of from a pause.
//
// The clients are the fencegate binary itself, re-executed with the hidden
// command "fencegate worker demo-client" (see package worker), so that a
// pause is a real SIGSTOP of a real process whose lease runs out in Redis
// while it cannot run.
//
// ForgedToken is a second scene, for signed tokens: a database that
// requires the proofs of a signing token cluster refuses a token never
// minted (the largest bigint with a made-up proof), a genuine token of
// another resource, a genuine token of another cluster under the same key
// (each FG008) and the fence without proof (FG003), moving no mark, while
// a lock holder writes before and after them.
package demo

import "errors"

var (
	// ErrStaleWriteAccepted means a run on the protected tables (through the
	// proxy or straight to PostgreSQL) let the stale write through: the demo
	// failed to show what it exists to show.
	ErrStaleWriteAccepted = errors.New("demo: the stale write was not rejected on the protected tables")
	// ErrClient means a client process failed in a way the scenario does not expect.
	ErrClient = errors.New("demo: client failed")
)
