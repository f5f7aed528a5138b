package main

import (
	"fmt"
	"io"
	"time"

	"github.com/fencegate/fencegate/bench"
)

// report collects the runs of every system at every concurrency.
type report struct {
	bench.Header
	Concurrency []int    `json:"concurrency"`
	Results     []*entry `json:"results"`
	Ratios      []ratio  `json:"ratios,omitempty"`

	systems []string
}

// entry is one system at one concurrency.
type entry struct {
	System      string       `json:"system"`
	Concurrency int          `json:"concurrency"`
	Median      bench.Result `json:"median"`
	// MedianCPU is the median CPU time the servers spent per token;
	// MedianSteal the median share of the machine's CPU stolen.
	MedianCPU time.Duration `json:"median_server_cpu_per_token"`
	// MedianClientCPU is the median CPU time the benchmark's own
	// process (clients and load) spent per token.
	MedianClientCPU time.Duration `json:"median_client_cpu_per_token"`
	MedianSteal     float64       `json:"median_steal"`
	Runs            []runResult   `json:"runs"`
}

// ratio compares two systems at one concurrency: the first one's figure
// divided by the second's (above 1 is better for throughput, below 1 for
// latency and CPU).
type ratio struct {
	Of          string  `json:"of"` // "fencegate/etcd", "fencegate-tls/fencegate", ...
	Concurrency int     `json:"concurrency"`
	PerSec      float64 `json:"tokens_per_sec"`
	P50         float64 `json:"p50"`
	P99         float64 `json:"p99"`
	CPU         float64 `json:"server_cpu_per_token"`
}

// ratioPairs are the comparisons reported when both systems ran: each
// against its peer, and each TLS variant against its plain self (what
// encryption costs).
var ratioPairs = [][2]string{
	{"fencegate", "etcd"}, {"fencegate-commit", "etcd"}, {"fencegate", "fencegate-commit"}, {"fencegate-tls", "etcd-tls"},
	{"fencegate-tls", "fencegate"}, {"etcd-tls", "etcd"},
}

func newReport(f bench.Flags, systems []system) *report {
	r := &report{
		Header:      bench.NewHeader("token issuance, 3 nodes each on 127.0.0.1, fsync on", map[string]string{}, f),
		Concurrency: f.Concurrency,
	}
	for _, s := range systems {
		r.Versions[s.name] = s.version
		r.systems = append(r.systems, s.name)
	}
	return r
}

func (r *report) add(system string, c int, res runResult) {
	e := r.find(system, c)
	if e == nil {
		e = &entry{System: system, Concurrency: c}
		r.Results = append(r.Results, e)
	}
	e.Runs = append(e.Runs, res)
	e.Median = bench.MedianResult(bench.Field(e.Runs, func(r runResult) bench.Result { return r.Result }))
	e.MedianCPU = bench.MedianDuration(bench.Field(e.Runs, func(r runResult) time.Duration { return r.CPUPerOp }))
	e.MedianClientCPU = bench.MedianDuration(bench.Field(e.Runs, func(r runResult) time.Duration { return r.ClientCPUPerOp }))
	e.MedianSteal = bench.Median(bench.Field(e.Runs, func(r runResult) float64 { return r.Steal }))
}

// finish computes the ratios once all runs are in.
func (r *report) finish() {
	r.Ratios = nil
	for _, c := range r.Concurrency {
		for _, pair := range ratioPairs {
			a, b := r.find(pair[0], c), r.find(pair[1], c)
			if a == nil || b == nil {
				continue
			}
			r.Ratios = append(r.Ratios, ratio{
				Of:          pair[0] + "/" + pair[1],
				Concurrency: c,
				PerSec:      bench.Ratio(a.Median.PerSec, b.Median.PerSec),
				P50:         bench.Ratio(float64(a.Median.P50), float64(b.Median.P50)),
				P99:         bench.Ratio(float64(a.Median.P99), float64(b.Median.P99)),
				CPU:         bench.Ratio(float64(a.MedianCPU), float64(b.MedianCPU)),
			})
		}
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
	return bench.WriteJSON(w, r)
}

func (r *report) writeText(w io.Writer) error {
	r.finish()
	fmt.Fprintf(w, "Token issuance, 3 nodes each on 127.0.0.1, fsync on. %s\n", r.Medians())
	for _, s := range r.systems {
		fmt.Fprintf(w, "  %-13s %s\n", s, r.Versions[s])
	}
	fmt.Fprintln(w)
	t := bench.NewTable("clients", "system", "tokens/s", "p50 ms", "p99 ms", "CPU µs/token", "client CPU µs/token", "steal", "errors", "tokens/s of each run").Labels(2)
	for i, c := range r.Concurrency {
		if i > 0 {
			t.Separator()
		}
		for _, s := range r.systems {
			e := r.find(s, c)
			if e == nil {
				continue
			}
			per := bench.Field(e.Runs, func(r runResult) float64 { return r.PerSec })
			t.Row(fmt.Sprint(c), s, bench.FormatRate(e.Median.PerSec), bench.FormatMillis(e.Median.P50),
				bench.FormatMillis(e.Median.P99), bench.FormatMicros(e.MedianCPU, 0), bench.FormatMicros(e.MedianClientCPU, 0), bench.FormatShare(e.MedianSteal),
				fmt.Sprint(e.Median.Errors), bench.JoinRates(per))
		}
		for _, q := range r.Ratios {
			if q.Concurrency == c {
				t.Row(fmt.Sprint(c), q.Of, bench.FormatRatio(q.PerSec), bench.FormatRatio(q.P50), bench.FormatRatio(q.P99), bench.FormatRatio(q.CPU))
			}
		}
	}
	_, err := t.WriteTo(w)
	if err == nil {
		err = r.writeRounds(w)
	}
	if err == nil && len(r.Ratios) > 0 {
		fmt.Fprintln(w, "\nRatios are the first system's figure over the second's: above 1 is better for tokens/s, below 1 for latency and CPU.\n"+
			"CPU µs/token is the user+system time of the three server processes per token, client CPU that of the benchmark's own process\n"+
			"(clients and load, on the same machine); steal the share of the machine's CPU the hypervisor took.")
	}
	return err
}

// writeRounds shows where a token's time goes on the read-index path: the
// confirmation round (the leader's questions to the other voters and a
// majority's answers, as the leader timed it) against the rest of the
// request's median latency (the client's HTTP request and answer, JSON,
// waiting for the next round), and the CPU the leader and the followers
// spent per token (the followers' is the answering side of the rounds,
// besides Raft's heartbeats; the leader's the client's requests, its side
// of the rounds and the reservations). The leader's figure is the median
// total less the median followers', so it is approximate.
func (r *report) writeRounds(w io.Writer) error {
	t := bench.NewTable("clients", "system", "rounds/s", "tokens/round", "round µs", "p50 µs", "rest of p50 µs", "round share of p50",
		"CPU µs/token: leader", "followers").Labels(2)
	rows := 0
	for _, c := range r.Concurrency {
		for _, s := range r.systems {
			e := r.find(s, c)
			if e == nil {
				continue
			}
			var rps, tpr []float64
			var mean, fcpu []time.Duration
			for _, run := range e.Runs {
				if run.RoundsPerSec > 0 {
					rps, tpr, mean = append(rps, run.RoundsPerSec), append(tpr, run.TokensPerRound), append(mean, run.RoundMean)
					fcpu = append(fcpu, run.FollowerCPUPerOp)
				}
			}
			if len(rps) == 0 {
				continue
			}
			round, p50 := bench.MedianDuration(mean), e.Median.P50
			t.Row(fmt.Sprint(c), s, bench.FormatRate(bench.Median(rps)), fmt.Sprintf("%.1f", bench.Median(tpr)), bench.FormatMicros(round, 0),
				bench.FormatMicros(p50, 0), bench.FormatMicros(p50-round, 0), fmt.Sprintf("%.0f%%", 100*float64(round)/float64(max(p50, 1))),
				bench.FormatMicros(e.MedianCPU-bench.MedianDuration(fcpu), 0), bench.FormatMicros(bench.MedianDuration(fcpu), 0))
			rows++
		}
	}
	if rows == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nWhere the time goes on the read-index path (medians over the runs):")
	_, err := t.WriteTo(w)
	return err
}
