package faults

import (
	"sort"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/cmd/internal/worker"
)

// paused is the history of the article's scenario: c1 takes the lock with
// token 1 and stalls; c2 takes it with token 2 and writes; c1 wakes and its
// write is rejected.
func paused() []worker.Event {
	return []worker.Event{
		{Time: 10, Client: "c1", Kind: KindAcquireOK, Op: 1, Token: 1},
		{Time: 20, Client: "nemesis", Kind: KindFaultStart, Fault: "pause-client", Target: "c1"},
		{Time: 30, Client: "c2", Kind: KindAcquireOK, Op: 1, Token: 2},
		{Time: 40, Client: "c2", Kind: KindTxnCall, Op: 1, Token: 2},
		{Time: 50, Client: "c2", Kind: KindTxnOK, Op: 1, Token: 2, Value: 0},
		{Time: 60, Client: "c2", Kind: KindRelease, Op: 1},
		{Time: 70, Client: "nemesis", Kind: KindFaultEnd, Fault: "pause-client", Target: "c1"},
		{Time: 80, Client: "c1", Kind: KindTxnCall, Op: 1, Token: 1},
		{Time: 90, Client: "c1", Kind: KindTxnStale, Op: 1, Token: 1},
		{Time: 95, Client: "c1", Kind: KindRelease, Op: 1},
	}
}

// wiped is paused() with token requests around the wipe of a token node:
// 5 handed out before it, then after appears.
func wiped(after int64) []worker.Event {
	return append(paused(),
		worker.Event{Time: 100, Client: "c3", Kind: KindTokenCall, Op: 0},
		worker.Event{Time: 105, Client: "c3", Kind: KindTokenOK, Op: 0, Token: 5},
		worker.Event{Time: 110, Client: "nemesis", Kind: KindFaultStart, Fault: FaultWipeNode, Target: "n2"},
		worker.Event{Time: 120, Client: "c3", Kind: KindTokenCall, Op: 1},
		worker.Event{Time: 125, Client: "c3", Kind: KindTokenOK, Op: 1, Token: after},
		worker.Event{Time: 130, Client: "nemesis", Kind: KindFaultEnd, Fault: FaultWipeNode, Target: "n2"},
	)
}

func sortByTime(evs []worker.Event) []worker.Event {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
	return evs
}

func TestCheck(t *testing.T) {
	good := DBState{Counter: 1, Rows: []Row{{Client: "c2", Op: 1, Token: 2, Prev: 0}},
		Effects: []EffectRow{{Client: "c2", Op: 1, Key: "k1", State: "delivered"}}, Charges: []string{"k1"}}
	withEffects := func(effects []EffectRow, charges ...string) DBState {
		d := good
		d.Effects, d.Charges = effects, charges
		return d
	}
	tests := []struct {
		name string
		evs  []worker.Event
		db   DBState
		want string // substring of a failure; "" means the run passes
	}{
		{"stale write rejected", paused(), good, ""},
		{"stale write accepted", paused(), DBState{Counter: 2, Rows: []Row{
			{Client: "c2", Op: 1, Token: 2, Prev: 0}, {Client: "c1", Op: 1, Token: 1, Prev: 1}}}, "stale: c1/1 committed token 1"},
		{"lost update", paused(), DBState{Counter: 1, Rows: []Row{
			{Client: "c2", Op: 1, Token: 2, Prev: 0}, {Client: "c1", Op: 1, Token: 1, Prev: 0}}}, "lost update"},
		{"counter drift", paused(), DBState{Counter: 5, Rows: good.Rows}, "counter = 5"},
		{"acknowledged but missing", paused(), DBState{}, "not in the database"},
		{"no double hold", paused()[3:], good, "did not bite"},
		{"tokens continue after a wipe", wiped(7), good, ""},
		{"counter restarted after a wipe", wiped(1), good, "wipe: c3/1 got token 1 after wipe-node of n2 began, not above 5"},
		{"token equal to one before the wipe", wiped(5), good, "not above 5"},
		// One operation that asked twice (the lock client retried): its
		// first answer (4) came before the wipe and below the 5 handed out
		// then, its second (8) after the wipe; neither is stale. (Once,
		// the first answer was taken for an answer to the second call.)
		{"two token calls in one operation around a wipe", sortByTime(append(wiped(7),
			worker.Event{Time: 100, Client: "c4", Kind: KindTokenCall, Op: 2},
			worker.Event{Time: 102, Client: "c4", Kind: KindTokenOK, Op: 2, Token: 4},
			worker.Event{Time: 115, Client: "c4", Kind: KindTokenCall, Op: 2},
			worker.Event{Time: 128, Client: "c4", Kind: KindTokenOK, Op: 2, Token: 8},
		)), good, ""},
		// c2's write (token 2) was called at 40; a prune to floor 2 that
		// ended at 35 must have refused it, one that ended at 45 raced it.
		{"write at the floor called after the prune", sortByTime(append(paused(),
			worker.Event{Time: 33, Client: "nemesis", Kind: KindFaultStart, Fault: FaultPruneMarks, Value: 2},
			worker.Event{Time: 35, Client: "nemesis", Kind: KindFaultEnd, Fault: FaultPruneMarks, Value: 2},
		)), good, "floor: c2/1 committed token 2, called after the marks were pruned to floor 2"},
		{"write called before the prune ended", sortByTime(append(paused(),
			worker.Event{Time: 38, Client: "nemesis", Kind: KindFaultStart, Fault: FaultPruneMarks, Value: 2},
			worker.Event{Time: 45, Client: "nemesis", Kind: KindFaultEnd, Fault: FaultPruneMarks, Value: 2},
		)), good, ""},
		{"effect of a rejected transaction", paused(), withEffects([]EffectRow{good.Effects[0], {Client: "c1", Op: 1, Key: "k2", State: "delivered"}}, "k1", "k2"),
			"effect of c1 op 1 committed without its increment"},
		{"effect missing", paused(), withEffects(nil), "increment of c2 op 1 has 0 effects"},
		{"effect not delivered", paused(), withEffects([]EffectRow{{Client: "c2", Op: 1, Key: "k1", State: "pending"}}), "is pending 30s after the run"},
		{"key charged twice", paused(), withEffects(good.Effects, "k1", "k1"), "key k1 charged 2 times"},
		{"charge without an effect", paused(), withEffects(good.Effects, "k1", "k9"), "charged key k9, which no committed effect has"},
		{"write above the floor", sortByTime(append(paused(),
			worker.Event{Time: 33, Client: "nemesis", Kind: KindFaultStart, Fault: FaultPruneMarks, Value: 1},
			worker.Event{Time: 35, Client: "nemesis", Kind: KindFaultEnd, Fault: FaultPruneMarks, Value: 1},
		)), good, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.evs, tt.db)
			got := strings.Join(r.Failures, "\n")
			if tt.want == "" && got != "" {
				t.Fatalf("Check() failures:\n%s", got)
			}
			if !strings.Contains(got, tt.want) {
				t.Fatalf("Check() failures = %q, want one containing %q", got, tt.want)
			}
		})
	}
	r := Check(paused(), good)
	if r.Faults != 1 || r.DoubleHolds != 1 || r.StaleRejected != 1 || r.StaleAccepted != 0 || r.Committed != 1 {
		t.Fatalf("Check() = %+v", r)
	}
}
