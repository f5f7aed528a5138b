package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/bench"
)

func TestReportRatios(t *testing.T) {
	f := bench.Flags{Runs: 2, Duration: time.Second, Concurrency: bench.IntList{1, 64}}
	r := newReport(f, []system{{name: "fencegate", version: "v"}, {name: "etcd", version: "3.4"}})
	for _, run := range []struct {
		sys    string
		c      int
		perSec float64
		p50    time.Duration
	}{
		{"fencegate", 1, 700, time.Millisecond}, {"fencegate", 1, 900, time.Millisecond},
		{"etcd", 1, 350, 2 * time.Millisecond}, {"etcd", 1, 350, 2 * time.Millisecond},
		{"fencegate", 64, 40000, 2 * time.Millisecond}, {"etcd", 64, 4000, 16 * time.Millisecond},
	} {
		r.add(run.sys, run.c, bench.Result{PerSec: run.perSec, P50: run.p50, P99: 2 * run.p50})
	}
	var buf bytes.Buffer
	if err := r.writeJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got report
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := []ratio{{Concurrency: 1, PerSec: 800.0 / 350, P50: 0.5, P99: 0.5}, {Concurrency: 64, PerSec: 10, P50: 0.125, P99: 0.125}}
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
	for _, s := range []string{"fencegate/etcd", "10.00x", "700 / 900"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, buf.String())
		}
	}
}
