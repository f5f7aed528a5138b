package faults

import (
	"context"
	"fmt"
	"strings"
)

// Fault names, as the --faults flag takes them. Catalog says what each does.
const (
	FaultPauseClient       = "pause-client"
	FaultPauseLeader       = "pause-leader"
	FaultPauseRedis        = "pause-redis"
	FaultKillToken         = "kill-token"
	FaultKillTokenMajority = "kill-token-majority"
	FaultKillTokenAll      = "kill-token-all"
	FaultKillRedis         = "kill-redis"
	FaultKillProxy         = "kill-proxy"
	FaultPartitionLeader   = "partition-leader"
	FaultPartitionRing     = "partition-ring"
	FaultClockRedis        = "clock-redis"
	FaultSlowDisk          = "slow-disk"
	FaultWipeNode          = "wipe-node"
	FaultReplaceNode       = "replace-node"
	FaultRestoreCopy       = "restore-copy"
	FaultPruneMarks        = "prune-marks"
	FaultKillRelay         = "kill-relay"
)

// Fault is one fault the nemesis can inject.
type Fault struct {
	// Name is the fault's name, as the --faults flag takes it.
	Name string
	// Doc says in one line what the nemesis does.
	Doc string
	// Weight is how many draws the fault counts as in a random schedule.
	Weight int
	// DoubleHold: the fault can by itself make two clients hold the lock
	// at once. A random schedule starts with one of these.
	DoubleHold bool

	inject func(n *Nemesis, ctx context.Context) error
}

// Catalog lists every fault the nemesis can inject, in a stable order: the
// one place a fault is described. The --faults flag's names and help, the
// random schedule's draw, the run report's counts and DESIGN.md's table of
// faults (checked by a test) all follow it.
//
// Weights: pause-leader is the case the token service's confirmation round
// exists for (a leader stopped with its reserved range in memory, resumed
// as a stale leader while a new leader hands out larger tokens), so it is
// drawn three times as often; prune-marks, quick and harmless to the run's
// progress, twice.
var Catalog = []Fault{
	{Name: FaultPauseClient, Doc: "SIGSTOP a lock holder for longer than the TTL", Weight: 1, DoubleHold: true,
		inject: (*Nemesis).pauseClient},
	{Name: FaultPauseLeader, Doc: "SIGSTOP the Raft leader past the election timeout", Weight: 3,
		inject: (*Nemesis).pauseLeader},
	{Name: FaultPauseRedis, Doc: "SIGSTOP a Redis master for longer than the TTL", Weight: 1,
		inject: (*Nemesis).pauseRedis},
	{Name: FaultKillToken, Doc: "kill -9 one token node, restart it", Weight: 1,
		inject: func(n *Nemesis, ctx context.Context) error { return n.killTokens(ctx, FaultKillToken, 1) }},
	{Name: FaultKillTokenMajority, Doc: "kill -9 two token nodes, restart them", Weight: 1,
		inject: func(n *Nemesis, ctx context.Context) error { return n.killTokens(ctx, FaultKillTokenMajority, 2) }},
	{Name: FaultKillTokenAll, Doc: "kill -9 every token node, restart them", Weight: 1,
		inject: func(n *Nemesis, ctx context.Context) error { return n.killTokens(ctx, FaultKillTokenAll, 3) }},
	{Name: FaultKillRedis, Doc: "kill -9 a Redis master (Redlock: a majority), restart at once without keys", Weight: 1, DoubleHold: true,
		inject: (*Nemesis).killRedis},
	{Name: FaultKillProxy, Doc: "kill -9 a proxy, restart it", Weight: 1,
		inject: (*Nemesis).killProxy},
	{Name: FaultPartitionLeader, Doc: "cut the Raft leader off from its peers", Weight: 1,
		inject: (*Nemesis).partitionLeader},
	{Name: FaultPartitionRing, Doc: "majority ring: a-b and b-c connected, a-c cut", Weight: 1,
		inject: (*Nemesis).partitionRing},
	{Name: FaultClockRedis, Doc: "jump a Redis master's (Redlock: a majority's) clock past the TTL", Weight: 1, DoubleHold: true,
		inject: (*Nemesis).clockRedis},
	{Name: FaultSlowDisk, Doc: "throttle the Raft leader's disk writes: every fsync stalls", Weight: 1,
		inject: (*Nemesis).slowDisk},
	{Name: FaultWipeNode, Doc: "kill -9 a token node, delete its data dir, restart it as before (it must refuse), replace it", Weight: 1,
		inject: (*Nemesis).wipeNode},
	{Name: FaultReplaceNode, Doc: "stop a token node, empty its data dir, replace it through membership", Weight: 1,
		inject: (*Nemesis).replaceNode},
	{Name: FaultRestoreCopy, Doc: "copy a token node's data dir, let the cluster move on, put the copy back and restart it (it must refuse), replace it", Weight: 1,
		inject: (*Nemesis).restoreCopy},
	{Name: FaultPruneMarks, Doc: "prune the marks to a floor drawn from the clients' tokens, up to the newest holder's", Weight: 2,
		inject: func(n *Nemesis, ctx context.Context) error { return n.pruneMarks(ctx, n.rng) }},
	{Name: FaultKillRelay, Doc: "kill -9 the effects relay, restart it", Weight: 1,
		inject: (*Nemesis).killRelay},
}

// faultByName indexes Catalog.
var faultByName = func() map[string]Fault {
	m := make(map[string]Fault, len(Catalog))
	for _, f := range Catalog {
		m[f.Name] = f
	}
	return m
}()

// AllFaults lists the name of every fault in Catalog, in its order.
var AllFaults = func() []string {
	out := make([]string, len(Catalog))
	for i, f := range Catalog {
		out[i] = f.Name
	}
	return out
}()

// FaultHelp describes every fault of Catalog, one per line: its name, what
// it does, and its weight when it is not 1.
func FaultHelp() string {
	width := 0
	for _, f := range Catalog {
		width = max(width, len(f.Name))
	}
	var b strings.Builder
	for i, f := range Catalog {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%-*s  %s", width, f.Name, f.Doc)
		if f.Weight != 1 {
			fmt.Fprintf(&b, " (drawn %dx as often)", f.Weight)
		}
	}
	return b.String()
}

// ParseFaults turns a comma-separated list of fault names ("all" for every
// fault) into a list, or says which name is unknown.
func ParseFaults(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" || s == "all" {
		return append([]string(nil), AllFaults...), nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if _, ok := faultByName[f]; !ok {
			return nil, fmt.Errorf("%w %q; choose from %s", ErrUnknownFault, f, strings.Join(AllFaults, ","))
		}
		out = append(out, f)
	}
	return out, nil
}

// weighted returns faults with each repeated as often as its weight says,
// for a uniform draw.
func weighted(faults []string) []string {
	var out []string
	for _, f := range faults {
		for range max(1, faultByName[f].Weight) {
			out = append(out, f)
		}
	}
	return out
}
