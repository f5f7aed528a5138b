package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestReportCPU(t *testing.T) {
	w, _ := findWorkload("select-simple")
	r := newReport(options{workloads: []workload{w}, systems: []string{"direct", "pgbouncer", "fencegate"}},
		map[string]string{})
	r.Concurrency = []int{8}
	us := time.Microsecond
	for _, run := range []struct {
		system      string
		tps         float64
		middle, all time.Duration
		steal       float64
	}{
		{"direct", 20000, 0, 100 * us, 0.01},
		{"direct", 10000, 0, 110 * us, 0.30}, // a run with a noisy neighbour
		{"direct", 19000, 0, 104 * us, 0.02},
		{"pgbouncer", 12000, 30 * us, 130 * us, 0.02},
		{"fencegate", 13000, 27 * us, 125 * us, 0.02},
	} {
		r.add(w.name, run.system, 8, pgbenchStats{TPS: run.tps, MiddleCPU: run.middle, MachineCPU: run.all, Steal: run.steal})
	}
	var text strings.Builder
	if err := r.writeText(&text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{
		"cpu µs/tx middle",
		"104.0", // direct's median machine CPU
		"27.0",  // the proxy's own
		"0.90x", // fencegate over pgbouncer, middle CPU
		"1.20x", // fencegate over direct, machine CPU
		"2%",    // median steal of direct
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	var js strings.Builder
	if err := r.writeJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil {
		t.Fatal(err)
	}
	for _, q := range back.Ratios {
		if q.Of == "fencegate" && q.Over == "direct" {
			if q.MiddleCPU != 0 || q.MachineCPU < 1.19 || q.MachineCPU > 1.21 {
				t.Errorf("fencegate/direct CPU ratios = %v middle, %v machine; want none and 1.20", q.MiddleCPU, q.MachineCPU)
			}
			return
		}
	}
	t.Errorf("no fencegate/direct ratio in %s", js.String())
}
