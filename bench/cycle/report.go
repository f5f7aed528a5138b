package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fencegate/fencegate/bench"
)

// report collects the runs and prints the table.
type report struct {
	opts     options
	versions map[string]string
	keys     []rowKey
	runs     map[rowKey][]measurement
	steps    []stepsOf
}

// stepsOf is the steps recorded of one cycle at one worker.
type stepsOf struct {
	mode, name string
	steps      *steps
}

// addSteps keeps s, once per mode and cycle, for the steps table.
func (r *report) addSteps(mode, name string, s *steps) {
	if s == nil {
		return
	}
	for _, o := range r.steps {
		if o.mode == mode && o.name == name {
			return
		}
	}
	r.steps = append(r.steps, stepsOf{mode, name, s})
}

// stepOrder is the order of the steps in the table; the fenced cycle's
// BEGIN carries the fence in the same round trip.
var stepOrder = []string{"grant", "token", "confirm", "BEGIN", "UPDATE", "COMMIT", "release"}

// writeSteps prints, per Redis mode, the median time of each step of a
// cycle at one worker, unfenced beside fenced.
func (r *report) writeSteps(w io.Writer) error {
	if len(r.steps) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nthe steps of one cycle at one worker, median ms over the measured runs (BEGIN carries the fence in the fenced cycle)\n\n")
	header := []string{"redis", "cycle", "cycles"}
	header = append(header, stepOrder...)
	header = append(header, "sum")
	t := bench.NewTable(header...).Labels(2)
	for _, so := range r.steps {
		names, meds, n := so.steps.medians()
		row := []string{so.mode, so.name, fmt.Sprint(n)}
		var sum time.Duration
		for _, step := range stepOrder {
			i := slices.Index(names, step)
			if i < 0 {
				row = append(row, "")
				continue
			}
			sum += meds[i]
			row = append(row, fmt.Sprintf("%.3f", float64(meds[i])/float64(time.Millisecond)))
		}
		row = append(row, fmt.Sprintf("%.3f", float64(sum)/float64(time.Millisecond)))
		t.Row(row...)
	}
	_, err := t.WriteTo(w)
	return err
}

type rowKey struct {
	mode, name string
	fenced     bool
	c          int
}

func (r *report) add(mode, name string, fenced bool, c int, m measurement) {
	if r.runs == nil {
		r.runs = map[rowKey][]measurement{}
	}
	k := rowKey{mode, name, fenced, c}
	if _, ok := r.runs[k]; !ok {
		r.keys = append(r.keys, k)
	}
	r.runs[k] = append(r.runs[k], m)
}

// medianOf returns the median over runs of f.
func medianOf(ms []measurement, f func(measurement) time.Duration) time.Duration {
	return bench.MedianDuration(bench.Field(ms, f))
}

func (r *report) write(w io.Writer) error {
	fmt.Fprintf(w, "\nlock + one-UPDATE transaction + release, medians of %d runs of %v (warm-up %v), each worker on its own resource and row\n\n",
		r.opts.Runs, r.opts.Duration, r.opts.Warmup)
	t := bench.NewTable("redis", "c", "cycle", "cycles/s", "runs", "p50 ms", "p99 ms", "client CPU/cycle", "servers CPU/cycle", "postgres CPU/cycle", "machine CPU/cycle", "unfenced/fenced").Labels(3)
	// Group the rows by Redis mode (in the order measured), then
	// concurrency, the unfenced cycle above the fenced one.
	var keys []rowKey
	var modes []string
	for _, k := range r.keys {
		if !slices.Contains(modes, k.mode) {
			modes = append(modes, k.mode)
		}
	}
	for _, mode := range modes {
		for _, c := range r.opts.Concurrency {
			for _, fenced := range []bool{false, true} {
				for _, k := range r.keys {
					if k.mode == mode && k.c == c && k.fenced == fenced {
						keys = append(keys, k)
					}
				}
			}
		}
	}
	last := ""
	for _, k := range keys {
		if last != "" && last != k.mode {
			t.Separator()
		}
		last = k.mode
		ms := r.runs[k]
		med := bench.MedianResult(bench.Field(ms, func(m measurement) bench.Result { return m.Result }))
		ratio := ""
		if k.fenced {
			ratio = r.pairedRatio(k, ms)
		}
		t.Row(k.mode, fmt.Sprint(k.c), k.name, bench.FormatRate(med.PerSec),
			bench.JoinRates(bench.Field(ms, func(m measurement) float64 { return m.PerSec })),
			bench.FormatMillis(med.P50), bench.FormatMillis(med.P99),
			micros(medianOf(ms, func(m measurement) time.Duration { return m.clientCPU })),
			micros(medianOf(ms, func(m measurement) time.Duration { return m.serverCPU })),
			micros(medianOf(ms, func(m measurement) time.Duration { return m.pgCPU })),
			micros(medianOf(ms, func(m measurement) time.Duration { return m.machineCPU })),
			ratio)
	}
	if _, err := t.WriteTo(w); err != nil {
		return err
	}
	if err := r.writeSteps(w); err != nil {
		return err
	}
	steal := bench.Median(bench.Field(r.all(), func(m measurement) float64 { return 100 * m.steal }))
	fmt.Fprintf(w, "\nCPU per cycle in µs, from /proc around each measured run: client is this process (lock clients, pgx, the\n"+
		"load itself); servers are the Redis servers of the row, and the three token nodes for the fenced cycle;\n"+
		"postgres is the benchmark database's backends (blank when PostgreSQL is not on this machine). unfenced/fenced is unfenced cycles/s over fenced\n"+
		"cycles/s in the same run, median over runs (lowest-highest): 1.30x means the fenced cycle runs at 1/1.3\n"+
		"of the unfenced rate. Median steal %.0f%%.\n\n", steal)
	for _, name := range []string{"fencegate", "postgresql", "redis-server"} {
		fmt.Fprintf(w, "%s: %s\n", name, r.versions[name])
	}
	return nil
}

// pairedRatio is the median over runs of the unfenced rate over the fenced
// rate of the same run, which ran right before or after it, with the
// lowest and highest of them: on a shared machine the rate moves with the
// neighbours from run to run, much less within one run's pair.
func (r *report) pairedRatio(k rowKey, fenced []measurement) string {
	var ratios []float64
	for pk, plain := range r.runs {
		if pk.mode != k.mode || pk.c != k.c || pk.fenced {
			continue
		}
		for i := range min(len(plain), len(fenced)) {
			ratios = append(ratios, bench.Ratio(plain[i].PerSec, fenced[i].PerSec))
		}
	}
	if len(ratios) == 0 {
		return ""
	}
	out := bench.FormatRatio(bench.Median(ratios))
	if len(ratios) > 1 {
		out += fmt.Sprintf(" (%s-%s)", bench.FormatRatio(slices.Min(ratios)), bench.FormatRatio(slices.Max(ratios)))
	}
	return out
}

func (r *report) all() []measurement {
	var out []measurement
	for _, k := range r.keys {
		out = append(out, r.runs[k]...)
	}
	return out
}

// micros prints a CPU time per cycle in microseconds.
func micros(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
