package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/internal/bench"
)

// measuredRun is runPgbench with the CPU time the run cost: that of the
// process in the middle (the proxy or PgBouncer) and that of the whole
// machine, both per transaction, and the share of the machine's time that
// the hypervisor stole. Where /proc cannot be read the figures stay 0.
//
// Throughput on a shared VM follows the neighbours; CPU per transaction
// does not, so it is the figure to compare across runs and machines.
func measuredRun(ctx context.Context, bin string, t pgbenchTarget, c int, d time.Duration, args []string) (pgbenchStats, error) {
	mid0, midErr := middleCPU(t.pid)
	m0, machErr := bench.ReadMachineCPU()
	st, err := runPgbench(ctx, bin, t, c, d, args)
	if err != nil {
		return st, err
	}
	mid1, midErr1 := middleCPU(t.pid)
	m1, machErr1 := bench.ReadMachineCPU()
	if st.Transactions <= 0 {
		return st, nil
	}
	n := time.Duration(st.Transactions)
	if t.pid != 0 && midErr == nil && midErr1 == nil {
		st.MiddleCPU = (mid1 - mid0) / n
	}
	if machErr == nil && machErr1 == nil {
		used := m1.Sub(m0)
		st.MachineCPU = used.Busy / n
		st.Steal = used.StealShare()
	}
	return st, nil
}

func middleCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	return bench.ProcessCPU(pid)
}

// formatMicros prints a CPU time per transaction in microseconds, or "-".
func formatMicros(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond))
}

// formatShare prints a fraction as a percentage with no decimals.
func formatShare(f float64) string {
	return fmt.Sprintf("%.0f%%", 100*f)
}

// cpuNote is the CPU per transaction of one run for the progress log.
func cpuNote(st pgbenchStats) string {
	if st.MiddleCPU > 0 {
		return formatMicros(st.MiddleCPU) + " µs (middle) " + formatMicros(st.MachineCPU) + " µs (machine)"
	}
	return formatMicros(st.MachineCPU) + " µs (machine)"
}
