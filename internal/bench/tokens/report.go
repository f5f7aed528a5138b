package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/fencegate/fencegate/internal/bench"
)

// report collects the runs of every system at every concurrency.
type report struct {
	Benchmark   string            `json:"benchmark"`
	Versions    map[string]string `json:"versions"`
	Runs        int               `json:"runs"`
	Duration    string            `json:"duration"`
	Warmup      string            `json:"warmup"`
	Concurrency []int             `json:"concurrency"`
	Results     []*entry          `json:"results"`
	Ratios      []ratio           `json:"ratios,omitempty"`

	systems []string
}

// entry is one system at one concurrency.
type entry struct {
	System      string         `json:"system"`
	Concurrency int            `json:"concurrency"`
	Median      bench.Result   `json:"median"`
	Runs        []bench.Result `json:"runs"`
}

// ratio compares fencegate with etcd at one concurrency: fencegate's figure
// divided by etcd's (above 1 is better for throughput, below 1 for latency).
type ratio struct {
	Concurrency int     `json:"concurrency"`
	PerSec      float64 `json:"tokens_per_sec"`
	P50         float64 `json:"p50"`
	P99         float64 `json:"p99"`
}

func newReport(f bench.Flags, systems []system) *report {
	r := &report{
		Benchmark:   "token issuance, 3 nodes each on 127.0.0.1, fsync on",
		Versions:    map[string]string{},
		Runs:        f.Runs,
		Duration:    f.Duration.String(),
		Warmup:      f.Warmup.String(),
		Concurrency: f.Concurrency,
	}
	for _, s := range systems {
		r.Versions[s.name] = s.version
		r.systems = append(r.systems, s.name)
	}
	return r
}

func (r *report) entry(system string, c int) *entry {
	for _, e := range r.Results {
		if e.System == system && e.Concurrency == c {
			return e
		}
	}
	e := &entry{System: system, Concurrency: c}
	r.Results = append(r.Results, e)
	return e
}

func (r *report) add(system string, c int, res bench.Result) {
	e := r.entry(system, c)
	e.Runs = append(e.Runs, res)
	e.Median = bench.MedianResult(e.Runs)
}

// finish computes the ratios once all runs are in.
func (r *report) finish() {
	r.Ratios = nil
	for _, c := range r.Concurrency {
		fg, et := r.find("fencegate", c), r.find("etcd", c)
		if fg == nil || et == nil {
			continue
		}
		r.Ratios = append(r.Ratios, ratio{
			Concurrency: c,
			PerSec:      bench.Ratio(fg.Median.PerSec, et.Median.PerSec),
			P50:         bench.Ratio(float64(fg.Median.P50), float64(et.Median.P50)),
			P99:         bench.Ratio(float64(fg.Median.P99), float64(et.Median.P99)),
		})
	}
}

func (r *report) find(system string, c int) *entry {
	for _, e := range r.Results {
		if e.System == system && e.Concurrency == c {
			return e
		}
	}
	return nil
}

func (r *report) writeJSON(w io.Writer) error {
	r.finish()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *report) writeText(w io.Writer) error {
	r.finish()
	fmt.Fprintf(w, "Token issuance, 3 nodes each on 127.0.0.1, fsync on. Median of %d runs of %s (warm-up %s).\n",
		r.Runs, r.Duration, r.Warmup)
	for _, s := range r.systems {
		fmt.Fprintf(w, "  %-9s %s\n", s, r.Versions[s])
	}
	fmt.Fprintln(w)
	t := bench.NewTable("clients", "system", "tokens/s", "p50 ms", "p99 ms", "errors", "tokens/s of each run").Labels(2)
	for i, c := range r.Concurrency {
		if i > 0 {
			t.Separator()
		}
		for _, s := range r.systems {
			e := r.find(s, c)
			if e == nil {
				continue
			}
			var per []float64
			for _, run := range e.Runs {
				per = append(per, run.PerSec)
			}
			t.Row(fmt.Sprint(c), s, bench.FormatRate(e.Median.PerSec), bench.FormatMillis(e.Median.P50),
				bench.FormatMillis(e.Median.P99), fmt.Sprint(e.Median.Errors), bench.JoinRates(per))
		}
		for _, q := range r.Ratios {
			if q.Concurrency == c {
				t.Row(fmt.Sprint(c), "fencegate/etcd", bench.FormatRatio(q.PerSec), bench.FormatRatio(q.P50), bench.FormatRatio(q.P99))
			}
		}
	}
	_, err := t.WriteTo(w)
	if err == nil && len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nRatios are fencegate's figure over etcd's: above 1 is better for tokens/s, below 1 is better for latency.")
	}
	return err
}
