package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/bench"
)

// pgbenchStats is what one pgbench run reports, and the CPU time it cost.
type pgbenchStats struct {
	TPS          float64       `json:"tps"`
	LatencyAvg   time.Duration `json:"latency_avg_ns"`
	Transactions int64         `json:"transactions"`
	Failed       int64         `json:"failed"`
	// MiddleCPU is the CPU time per transaction of the process between
	// pgbench and PostgreSQL (0 on the direct path).
	MiddleCPU time.Duration `json:"middle_cpu_per_tx_ns,omitempty"`
	// MiddleSwitches is how many times per transaction the middle
	// process's threads were switched out (voluntary and not): a wake-up
	// costs a proxy more than any of its own code.
	MiddleSwitches float64 `json:"middle_switches_per_tx,omitempty"`
	// MachineCPU is the CPU time per transaction of the whole machine:
	// pgbench, PostgreSQL and the middle process together.
	MachineCPU time.Duration `json:"machine_cpu_per_tx_ns,omitempty"`
	// Steal is the share of the machine's CPU time the hypervisor gave to
	// other guests during the run.
	Steal float64 `json:"steal"`
}

// errNoTPS means pgbench printed no throughput line.
var errNoTPS = errors.New("pgbench printed no tps line")

// parsePgbench reads the summary pgbench prints at the end of a run. It
// takes the tps that leaves out the time to open connections: "tps = N
// (without initial connection time)" (pgbench 14 and later) or "(excluding
// connections establishing)" (older), else the only tps line.
func parsePgbench(out string) (pgbenchStats, error) {
	var s pgbenchStats
	haveTPS, exact := false, false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			key, val, ok = strings.Cut(line, ":")
		}
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "tps":
			num, note, _ := strings.Cut(val, " ")
			tps, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return s, fmt.Errorf("parse pgbench line %q: %w", line, err)
			}
			without := strings.Contains(note, "without initial connection") || strings.Contains(note, "excluding connections")
			if !haveTPS || (without && !exact) {
				s.TPS, haveTPS, exact = tps, true, without
			}
		case "latency average":
			ms, err := strconv.ParseFloat(strings.TrimSuffix(val, " ms"), 64)
			if err != nil {
				return s, fmt.Errorf("parse pgbench line %q: %w", line, err)
			}
			s.LatencyAvg = time.Duration(ms * float64(time.Millisecond))
		case "number of transactions actually processed":
			num, _, _ := strings.Cut(val, "/")
			n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
			if err != nil {
				return s, fmt.Errorf("parse pgbench line %q: %w", line, err)
			}
			s.Transactions = n
		case "number of failed transactions":
			num, _, _ := strings.Cut(val, " ")
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				return s, fmt.Errorf("parse pgbench line %q: %w", line, err)
			}
			s.Failed = n
		}
	}
	if !haveTPS {
		return s, errNoTPS
	}
	return s, nil
}

// pgbenchTarget is where pgbench connects.
type pgbenchTarget struct {
	host string
	port int
	user string
	db   string
	// pid is the process between pgbench and PostgreSQL (the proxy or
	// PgBouncer), whose CPU time is measured; 0 on the direct path.
	pid int
}

func (t pgbenchTarget) args() []string {
	return []string{"-h", t.host, "-p", strconv.Itoa(t.port), "-U", t.user}
}

// pgbenchEnv keeps the runs comparable: no TLS on any path (the proxy and
// PgBouncer are measured in plain text, so direct is too) and no password
// prompt.
func pgbenchEnv() []string {
	return append(os.Environ(), "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10")
}

// runPgbench runs pgbench with args (workload options) against t for d at
// c clients (-j c), without vacuuming first.
func runPgbench(ctx context.Context, bin string, t pgbenchTarget, c int, d time.Duration, args []string) (pgbenchStats, error) {
	secs := max(1, int((d+time.Second-1)/time.Second))
	full := append(t.args(), "-n", "-c", strconv.Itoa(c), "-j", strconv.Itoa(c), "-T", strconv.Itoa(secs))
	full = append(full, args...)
	full = append(full, t.db)
	cmd := bench.Command(ctx, bin, full...)
	cmd.Env = pgbenchEnv()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return pgbenchStats{}, ctx.Err()
	}
	text := string(out)
	if err != nil {
		return pgbenchStats{}, fmt.Errorf("pgbench %s: %w\n%s", strings.Join(full, " "), err, tail(text, 12))
	}
	s, err := parsePgbench(text)
	if err != nil {
		return s, fmt.Errorf("pgbench %s: %w\n%s", strings.Join(full, " "), err, tail(text, 12))
	}
	if s.Failed > 0 || strings.Contains(text, "aborted") {
		return s, fmt.Errorf("pgbench %s: %d transactions failed\n%s", strings.Join(full, " "), s.Failed, tail(text, 12))
	}
	return s, nil
}

// initPgbench creates the pgbench tables at the given scale and vacuums them.
func initPgbench(ctx context.Context, bin string, t pgbenchTarget, scale int) error {
	args := append(t.args(), "-i", "-q", "-s", strconv.Itoa(scale), t.db)
	cmd := bench.Command(ctx, bin, args...)
	cmd.Env = pgbenchEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgbench -i -s %d: %w\n%s", scale, err, tail(string(out), 12))
	}
	return nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
