package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/bench"
)

func TestReportRatios(t *testing.T) {
	f := bench.Flags{Runs: 2, Duration: time.Second, Concurrency: bench.IntList{1, 64}}
	r := newReport(f, []system{{name: "fencegate", version: "v"}, {name: "etcd", version: "3.4"}, {name: "fencegate-tls", version: "v"}})
	for _, run := range []struct {
		sys    string
		c      int
		perSec float64
		p50    time.Duration
	}{
		{"fencegate", 1, 700, time.Millisecond}, {"fencegate", 1, 900, time.Millisecond},
		{"etcd", 1, 350, 2 * time.Millisecond}, {"etcd", 1, 350, 2 * time.Millisecond},
		{"fencegate", 64, 40000, 2 * time.Millisecond}, {"etcd", 64, 4000, 16 * time.Millisecond},
		{"fencegate-tls", 1, 400, 2 * time.Millisecond},
	} {
		r.add(run.sys, run.c, runResult{Result: bench.Result{PerSec: run.perSec, P50: run.p50, P99: 2 * run.p50}, CPUPerOp: time.Duration(run.perSec)})
	}
	var buf bytes.Buffer
	if err := r.writeJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got report
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := []ratio{
		{Of: "fencegate/etcd", Concurrency: 1, PerSec: 800.0 / 350, P50: 0.5, P99: 0.5, CPU: 800.0 / 350},
		{Of: "fencegate-tls/fencegate", Concurrency: 1, PerSec: 0.5, P50: 2, P99: 2, CPU: 0.5},
		{Of: "fencegate/etcd", Concurrency: 64, PerSec: 10, P50: 0.125, P99: 0.125, CPU: 10},
	}
	if len(got.Ratios) != len(want) {
		t.Fatalf("ratios=%+v, want %+v", got.Ratios, want)
	}
	for i := range want {
		if got.Ratios[i] != want[i] {
			t.Errorf("ratio %d=%+v, want %+v", i, got.Ratios[i], want[i])
		}
	}
	buf.Reset()
	if err := r.writeText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"fencegate/etcd", "fencegate-tls/fencegate", "10.00x", "700 / 900", "CPU µs/token", "client CPU µs/token"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, buf.String())
		}
	}
}
