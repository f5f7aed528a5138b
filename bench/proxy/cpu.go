package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/bench"
	"github.com/fencegate/fencegate/internal/cputime"
)

// measuredRun is runPgbench with the CPU time the run cost: that of the
// process in the middle (the proxy or PgBouncer) and that of the whole
// machine, both per transaction, and the share of the machine's time that
// the hypervisor stole. Where /proc cannot be read the figures stay 0.
//
// Throughput on a shared VM follows the neighbours; CPU per transaction
// does not, so it is the figure to compare across runs and machines.
func measuredRun(ctx context.Context, bin string, t pgbenchTarget, c int, d time.Duration, args []string) (pgbenchStats, error) {
	mid0, midErr := cputime.ProcessCPU(t.pid)
	sw0, swErr := middleSwitches(t.pid)
	m0, machErr := cputime.ReadMachineCPU()
	st, err := runPgbench(ctx, bin, t, c, d, args)
	if err != nil {
		return st, err
	}
	mid1, midErr1 := cputime.ProcessCPU(t.pid)
	sw1, swErr1 := middleSwitches(t.pid)
	m1, machErr1 := cputime.ReadMachineCPU()
	if st.Transactions <= 0 {
		return st, nil
	}
	n := time.Duration(st.Transactions)
	if t.pid != 0 && midErr == nil && midErr1 == nil {
		st.MiddleCPU = (mid1 - mid0) / n
	}
	if t.pid != 0 && swErr == nil && swErr1 == nil && sw1 >= sw0 {
		st.MiddleSwitches = float64(sw1-sw0) / float64(n)
	}
	if machErr == nil && machErr1 == nil {
		used := m1.Sub(m0)
		st.MachineCPU = used.Busy / n
		st.Steal = used.StealShare()
	}
	return st, nil
}

// middleSwitches returns how many context switches the threads of process
// pid have made so far, voluntary and not, from /proc/PID/task/*/status. A
// thread that ends during a run takes its count with it; the proxy's and
// PgBouncer's threads live as long as the process.
func middleSwitches(pid int) (uint64, error) {
	if pid == 0 {
		return 0, nil
	}
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("list threads of process %d: %v", pid, err)
	}
	var total uint64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		n, err := parseSwitches(string(b))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		total += n
	}
	return total, nil
}

// parseSwitches adds voluntary_ctxt_switches and nonvoluntary_ctxt_switches
// from the text of a /proc status file.
func parseSwitches(s string) (uint64, error) {
	var total uint64
	found := 0
	for line := range strings.Lines(s) {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "voluntary_ctxt_switches" && key != "nonvoluntary_ctxt_switches") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", key, err)
		}
		total += n
		found++
	}
	if found != 2 {
		return 0, errors.New("no voluntary_ctxt_switches and nonvoluntary_ctxt_switches lines")
	}
	return total, nil
}

// formatSwitches prints context switches per transaction, or "-".
func formatSwitches(f float64) string {
	if f <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", f)
}

// cpuNote is the CPU per transaction of one run for the progress log.
func cpuNote(st pgbenchStats) string {
	if st.MiddleCPU > 0 {
		return bench.FormatMicros(st.MiddleCPU, 1) + " µs (middle) " + bench.FormatMicros(st.MachineCPU, 1) + " µs (machine)  cs/tx " +
			formatSwitches(st.MiddleSwitches)
	}
	return bench.FormatMicros(st.MachineCPU, 1) + " µs (machine)"
}
