package faults_test

import (
	"fmt"

	"github.com/fencegate/fencegate/cmd/internal/faults"
	"github.com/fencegate/fencegate/cmd/internal/worker"
)

// A paused holder's write arrives after another holder's: the fence rejects
// it, and the checkers find a double hold, one stale write rejected and none
// accepted, and the current holder's effect charged once.
func ExampleCheck() {
	evs := []worker.Event{
		{Time: 10, Client: "c1", Kind: faults.KindAcquireOK, Op: 1, Token: 1},
		{Time: 20, Client: "nemesis", Kind: faults.KindFaultStart, Fault: faults.FaultPauseClient, Target: "c1"},
		{Time: 30, Client: "c2", Kind: faults.KindAcquireOK, Op: 1, Token: 2},
		{Time: 40, Client: "c2", Kind: faults.KindTxnCall, Op: 1, Token: 2},
		{Time: 50, Client: "c2", Kind: faults.KindTxnOK, Op: 1, Token: 2, Value: 0},
		{Time: 60, Client: "c2", Kind: faults.KindRelease, Op: 1},
		{Time: 70, Client: "nemesis", Kind: faults.KindFaultEnd, Fault: faults.FaultPauseClient, Target: "c1"},
		{Time: 80, Client: "c1", Kind: faults.KindTxnCall, Op: 1, Token: 1},
		{Time: 90, Client: "c1", Kind: faults.KindTxnStale, Op: 1, Token: 1},
		{Time: 95, Client: "c1", Kind: faults.KindRelease, Op: 1},
	}
	db := faults.DBState{Counter: 1, Rows: []faults.Row{{Client: "c2", Op: 1, Token: 2, Prev: 0}},
		// c2's transaction recorded its call to the provider, which the
		// relay delivered; the provider charged it once.
		Effects: []faults.EffectRow{{Client: "c2", Op: 1, Key: "key-c2-1", State: "delivered"}},
		Charges: []string{"key-c2-1"}}
	r := faults.Check(evs, db)
	fmt.Println(r.OK(), r.DoubleHolds, r.StaleRejected, r.StaleAccepted)
	// Output: true 1 1 0
}

func ExampleParseScenario() {
	list, err := faults.ParseScenario("isolated-old-leader")
	fmt.Println(list, err)
	list, err = faults.ParseScenario("kill-redis,pause-client")
	fmt.Println(list, err)
	// Output:
	// [partition-leader pause-client] <nil>
	// [kill-redis pause-client] <nil>
}
