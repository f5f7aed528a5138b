package faults

// faultWeights makes some faults more likely in a random campaign: each
// counts as that many draws (1 when not listed). pause-leader is the case
// the token service's confirmation round exists for (a leader stopped with
// its reserved range in memory, resumed as a stale leader while a new
// leader hands out larger tokens), so it is drawn three times as often;
// prune-marks, quick and harmless to the run's progress, twice.
var faultWeights = map[string]int{
	FaultPauseLeader: 3,
	FaultPruneMarks:  2,
}

// weighted returns faults with each repeated as often as its weight says,
// for a uniform draw.
func weighted(faults []string) []string {
	var out []string
	for _, f := range faults {
		for range max(1, faultWeights[f]) {
			out = append(out, f)
		}
	}
	return out
}
