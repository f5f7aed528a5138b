package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencegate/fencegate/bench"
)

// report collects the pgbench runs of every workload, system and
// concurrency.
type report struct {
	bench.Header
	Scale       int      `json:"scale"`
	Concurrency []int    `json:"concurrency"`
	Results     []*entry `json:"results"`
	Ratios      []ratio  `json:"ratios,omitempty"`

	workloads []workload
	systems   []string
}

// entry is one workload on one system at one concurrency.
type entry struct {
	Workload    string        `json:"workload"`
	System      string        `json:"system"`
	Concurrency int           `json:"concurrency"`
	TPS         float64       `json:"median_tps"`
	LatencyAvg  time.Duration `json:"median_latency_avg_ns"`
	MiddleCPU   time.Duration `json:"median_middle_cpu_per_tx_ns,omitempty"`
	// MiddleSwitches is the median of the runs' context switches per
	// transaction of the middle process.
	MiddleSwitches float64        `json:"median_middle_switches_per_tx,omitempty"`
	MachineCPU     time.Duration  `json:"median_machine_cpu_per_tx_ns,omitempty"`
	Steal          float64        `json:"median_steal"`
	Runs           []pgbenchStats `json:"runs"`
}

// ratio is the median TPS of one system over another's.
type ratio struct {
	Workload    string  `json:"workload"`
	Concurrency int     `json:"concurrency"`
	Of          string  `json:"of"`
	Over        string  `json:"over"`
	Ratio       float64 `json:"ratio"`
	// Goal is the ratio the project aims at (0 when there is none).
	Goal float64 `json:"goal,omitempty"`
	// MiddleCPU and MachineCPU compare CPU time per transaction the same
	// way (of over over; NaN, omitted, where a side has no figure).
	MiddleCPU  float64 `json:"middle_cpu_ratio,omitempty"`
	MachineCPU float64 `json:"machine_cpu_ratio,omitempty"`
}

func newReport(o options, versions map[string]string) *report {
	return &report{
		Header:      bench.NewHeader("pgbench: direct vs PgBouncer (session) vs fencegate proxy, all on 127.0.0.1, no TLS", versions, o.Flags),
		Scale:       o.scale,
		Concurrency: o.Concurrency,
		workloads:   o.workloads,
		systems:     o.systems,
	}
}

func (r *report) find(w, s string, c int) *entry {
	for _, e := range r.Results {
		if e.Workload == w && e.System == s && e.Concurrency == c {
			return e
		}
	}
	return nil
}

func (r *report) add(w, s string, c int, st pgbenchStats) {
	e := r.find(w, s, c)
	if e == nil {
		e = &entry{Workload: w, System: s, Concurrency: c}
		r.Results = append(r.Results, e)
	}
	e.Runs = append(e.Runs, st)
	e.TPS = bench.Median(bench.Field(e.Runs, func(r pgbenchStats) float64 { return r.TPS }))
	e.LatencyAvg = bench.MedianDuration(bench.Field(e.Runs, func(r pgbenchStats) time.Duration { return r.LatencyAvg }))
	e.MiddleCPU = bench.MedianDuration(bench.Field(e.Runs, func(r pgbenchStats) time.Duration { return r.MiddleCPU }))
	e.MiddleSwitches = bench.Median(bench.Field(e.Runs, func(r pgbenchStats) float64 { return r.MiddleSwitches }))
	e.MachineCPU = bench.MedianDuration(bench.Field(e.Runs, func(r pgbenchStats) time.Duration { return r.MachineCPU }))
	e.Steal = bench.Median(bench.Field(e.Runs, func(r pgbenchStats) float64 { return r.Steal }))
}

// cpuRatio is a/b of two CPU times per transaction, 0 (no figure) when
// either is missing.
func cpuRatio(a, b time.Duration) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// finish computes the ratios: the proxy against direct and PgBouncer, and
// PgBouncer against direct, with the goals the project set.
func (r *report) finish() {
	r.Ratios = nil
	for _, w := range r.workloads {
		goal := 0.9
		switch {
		case w.fenced:
			goal = 0.85
		case w.unfenced:
			goal = 0 // no goal for writes without fences
		}
		for _, c := range r.Concurrency {
			for _, p := range []struct {
				of, over string
				goal     float64
			}{{"fencegate", "direct", goal}, {"fencegate", "pgbouncer", 1}, {"pgbouncer", "direct", 0}} {
				a, b := r.find(w.name, p.of, c), r.find(w.name, p.over, c)
				if a == nil || b == nil {
					continue
				}
				if (w.fenced || w.unfenced) && p.of == "fencegate" && p.over == "pgbouncer" {
					p.goal = 0 // no goal for writes against PgBouncer
				}
				r.Ratios = append(r.Ratios, ratio{Workload: w.name, Concurrency: c, Of: p.of, Over: p.over,
					Ratio: bench.Ratio(a.TPS, b.TPS), Goal: p.goal,
					MiddleCPU: cpuRatio(a.MiddleCPU, b.MiddleCPU), MachineCPU: cpuRatio(a.MachineCPU, b.MachineCPU)})
			}
		}
	}
}

func (r *report) writeJSON(w io.Writer) error {
	r.finish()
	return bench.WriteJSON(w, r)
}

func (r *report) writeText(w io.Writer) error {
	r.finish()
	fmt.Fprintf(w, "pgbench on 127.0.0.1 without TLS, scale %d. %s\n", r.Scale, r.Medians())
	for _, k := range []string{"postgresql", "pgbench", "pgbouncer", "fencegate"} {
		if v, ok := r.Versions[k]; ok {
			fmt.Fprintf(w, "  %-10s %s\n", k, v)
		}
	}
	fmt.Fprintln(w)
	t := bench.NewTable("workload", "clients", "system", "tps", "latency ms", "cpu µs/tx middle", "machine", "cs/tx", "steal",
		"tps of each run", "goal").Labels(3)
	first := true
	for _, wl := range r.workloads {
		for _, c := range r.Concurrency {
			if !first {
				t.Separator()
			}
			first = false
			label, clients := wl.desc, fmt.Sprint(c)
			for _, s := range r.systems {
				e := r.find(wl.name, s, c)
				if e == nil {
					continue
				}
				per := bench.Field(e.Runs, func(r pgbenchStats) float64 { return r.TPS })
				t.Row(label, clients, s, bench.FormatRate(e.TPS), bench.FormatMillis(e.LatencyAvg),
					bench.FormatMicros(e.MiddleCPU, 1), bench.FormatMicros(e.MachineCPU, 1), formatSwitches(e.MiddleSwitches), bench.FormatShare(e.Steal),
					bench.JoinRates(per))
				label, clients = "", ""
			}
			for _, q := range r.Ratios {
				if q.Workload == wl.name && q.Concurrency == c {
					t.Row("", "", q.Of+"/"+q.Over, bench.FormatRatio(q.Ratio), "",
						formatCPURatio(q.MiddleCPU), formatCPURatio(q.MachineCPU), "", "", "", goalNote(q))
				}
			}
		}
	}
	if _, err := t.WriteTo(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nGoals: through the proxy >= 0.90x direct and ahead of PgBouncer for pass-through;")
	fmt.Fprintln(w, ">= 0.85x direct for the fenced write (the same transaction on the protected table "+fencedTable+", sent direct).")
	fmt.Fprintln(w, "Every path runs as the same application role; the tables other than "+fencedTable+" are not protected.")
	fmt.Fprintln(w, "cpu µs/tx: CPU time per transaction of the middle process (PgBouncer or the proxy) and of the whole")
	fmt.Fprintln(w, "machine (pgbench and PostgreSQL included); on a ratio row, the same ratio of CPU times (lower is cheaper).")
	fmt.Fprintln(w, "cs/tx: context switches per transaction of the middle process's threads, voluntary and not.")
	fmt.Fprintln(w, "steal: share of the machine's CPU time taken by other guests of the hypervisor during the runs.")
	return nil
}

// formatCPURatio prints a ratio of CPU times, or nothing when there is none.
func formatCPURatio(r float64) string {
	if r == 0 {
		return ""
	}
	return bench.FormatRatio(r)
}

func goalNote(q ratio) string {
	if q.Goal == 0 {
		return ""
	}
	verdict := "met"
	if q.Ratio < q.Goal || (q.Goal == 1 && q.Ratio == 1) {
		verdict = "missed"
	}
	op := ">="
	if q.Goal == 1 {
		op = ">"
	}
	return strings.Join([]string{op, bench.FormatRatio(q.Goal), verdict}, " ")
}
