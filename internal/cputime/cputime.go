// Package cputime reads CPU time from /proc, for benchmarks. On a shared
// VM, throughput moves by tens of percent from run to run with what the
// neighbours do; the CPU a process spends per operation barely moves, so a
// benchmark that reports both can tell a slower program from a slower
// machine. Linux only: elsewhere the readers return an error and a
// benchmark leaves the figures out.
package cputime

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc's CPU times: USER_HZ, which Linux fixes at
// 100 for user space whatever the kernel's own tick rate.
const clockTick = 10 * time.Millisecond

// ProcessCPU returns the user plus system CPU time the processes pids have
// used, all their threads together (0 for no pids).
func ProcessCPU(pids ...int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("read CPU time of process %d: %w", pid, err)
		}
		d, err := parseProcessStat(string(b))
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// parseProcessStat reads utime and stime (fields 14 and 15) from the text
// of /proc/PID/stat. The command name (field 2) is in parentheses and may
// hold spaces and parentheses itself, so fields are counted from the last
// ')'.
func parseProcessStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/PID/stat: no command name in %q", truncate(s, 60))
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/PID/stat: %d fields after the command name, want at least 13", len(f))
	}
	var total time.Duration
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/PID/stat: CPU time %q: %w", v, err)
		}
		total += time.Duration(n) * clockTick
	}
	return total, nil
}

// MachineCPU is the machine's CPU time so far, summed over its CPUs.
type MachineCPU struct {
	// Busy is time spent running anything: user, nice, system, irq and
	// softirq (guest time is already part of user).
	Busy time.Duration
	// Steal is time the hypervisor gave this machine's CPUs to others.
	Steal time.Duration
	// Total is every state, idle and iowait included.
	Total time.Duration
}

// ReadMachineCPU returns the machine's CPU times from /proc/stat.
func ReadMachineCPU() (MachineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, fmt.Errorf("read machine CPU time: %w", err)
	}
	return parseMachineStat(string(b))
}

// parseMachineStat reads the "cpu" line of /proc/stat: user nice system
// idle iowait irq softirq steal [guest guest_nice].
func parseMachineStat(s string) (MachineCPU, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("parse /proc/stat: first line %q is not the cpu total", truncate(line, 60))
	}
	var t [8]time.Duration
	for i := range t {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("parse /proc/stat: %q: %w", f[i+1], err)
		}
		t[i] = time.Duration(n) * clockTick
	}
	user, nice, system, idle, iowait, irq, softirq, steal := t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]
	busy := user + nice + system + irq + softirq
	return MachineCPU{Busy: busy, Steal: steal, Total: busy + idle + iowait + steal}, nil
}

// Sub returns the CPU time spent between an earlier reading and m.
func (m MachineCPU) Sub(earlier MachineCPU) MachineCPU {
	return MachineCPU{Busy: m.Busy - earlier.Busy, Steal: m.Steal - earlier.Steal, Total: m.Total - earlier.Total}
}

// StealShare is the fraction of the CPU time that was stolen, 0 when no
// time passed.
func (m MachineCPU) StealShare() float64 {
	if m.Total <= 0 {
		return 0
	}
	return float64(m.Steal) / float64(m.Total)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
