package faults

import "testing"

func TestWeightedFaults(t *testing.T) {
	got := weighted([]string{FaultPauseClient, FaultPauseLeader})
	n := 0
	for _, f := range got {
		if f == FaultPauseLeader {
			n++
		}
	}
	if len(got) != 4 || n != 3 {
		t.Fatalf("weighted = %v; want pause-leader three times, pause-client once", got)
	}
}
