package faults

import (
	"fmt"
	"sort"
	"strings"
)

// Scenarios are the named regression scenarios: fixed fault sequences that
// replay the situations the product exists for, and any that once exposed a
// bug. Each ends with, or is, a fault that can double-grant the lock, so that
// checker (4) holds on every run.
var Scenarios = map[string][]string{
	// The article's paused holder: the holder stalls (GC, VM suspend) past
	// the TTL, another client takes the lock and writes, the first wakes
	// and writes with its old token.
	"paused-holder": {FaultPauseClient},
	// A Redis master restarted without persistence forgets the lock while
	// its holder still works under it (distlock.md's warning).
	"redis-restart-without-persistence": {FaultKillRedis},
	// A Redis master's clock jumps forward past the TTL: Redis expires the
	// key early, by its own clock.
	"redis-clock-jump": {FaultClockRedis},
	// The Raft leader is cut off while still believing it leads; then a
	// holder is paused. The deposed leader must mint nothing.
	"isolated-old-leader": {FaultPartitionLeader, FaultPauseClient},
	// Raft leader paused past the election timeout, then resumed as a
	// stale leader; then a holder is paused.
	"paused-leader": {FaultPauseLeader, FaultPauseClient},
	// Majority ring partition (each node sees a majority, no two see the
	// same one); then a holder is paused.
	"majority-ring": {FaultPartitionRing, FaultPauseClient},
	// Every token node killed with -9 and restarted: tokens must resume
	// above every token handed out; then a holder is paused.
	"token-cluster-crash": {FaultKillTokenAll, FaultPauseClient},
	// The Raft leader's fsyncs stall (its disk takes two writes a second):
	// commits slow down or the leader is replaced; then a holder is paused.
	"slow-leader-disk": {FaultSlowDisk, FaultPauseClient},
	// A proxy killed and restarted: the fences live in PostgreSQL, so the
	// restarted proxy still rejects the paused holder's stale write.
	"proxy-crash": {FaultKillProxy, FaultPauseClient},
	// The effects relay killed twice around a paused holder: every committed
	// increment's call reaches the provider once, none of the stale holder's.
	"relay-crash": {FaultKillRelay, FaultPauseClient, FaultKillRelay},
	// A token node loses its disk and is restarted with its usual flags:
	// it must refuse to start (an empty node once voted a stale node into
	// leadership and the counter restarted at 1), and comes back through
	// the replacement procedure; then a holder is paused.
	"lost-disk": {FaultWipeNode, FaultPauseClient},
	// A healthy token node replaced through membership (remove, start with
	// --join, add, promoted once caught up); then a holder is paused.
	"node-replacement": {FaultReplaceNode, FaultPauseClient},
	// A token node's data directory put back from an older copy while the
	// cluster moved on (a VM snapshot rolled back): its peers saw it hold
	// more, so it must refuse to start, and comes back through the
	// replacement procedure; then a holder is paused.
	"restored-copy": {FaultRestoreCopy, FaultPauseClient},
}

// ScenarioNames returns the scenario names, sorted.
func ScenarioNames() []string {
	names := make([]string, 0, len(Scenarios))
	for n := range Scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParseScenario accepts a scenario name or a comma-separated fault list.
func ParseScenario(s string) ([]string, error) {
	if faults, ok := Scenarios[s]; ok {
		return faults, nil
	}
	faults, err := ParseFaults(s)
	if err != nil {
		return nil, fmt.Errorf("%q is neither a scenario (%s) nor a fault list: %w", s, strings.Join(ScenarioNames(), ", "), err)
	}
	return faults, nil
}
