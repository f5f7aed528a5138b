package cputime

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseProcessStat(t *testing.T) {
	// A command name with a space and a parenthesis, as a process may set.
	stat := "4242 (fg (x) proxy) S 1 4242 4242 0 -1 4194560 1200 0 0 0 310 95 0 0 20 0 9 0 7788 0\n"
	got, err := parseProcessStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4050 * time.Millisecond; got != want {
		t.Errorf("CPU time = %v, want %v (utime 310 + stime 95 ticks)", got, want)
	}
	for _, bad := range []string{"", "12 (x) S 1 2", "12 (x) S 1 2 3 4 5 6 7 8 9 10 -3 4 5"} {
		if _, err := parseProcessStat(bad); err == nil {
			t.Errorf("parseProcessStat(%q) took it", bad)
		}
	}
}

func TestProcessCPUOfThisProcess(t *testing.T) {
	if d, err := ProcessCPU(); d != 0 || err != nil {
		t.Fatalf("ProcessCPU()=%v, %v; want 0 for no processes", d, err)
	}
	if _, err := ProcessCPU(os.Getpid(), 1<<30); err == nil {
		t.Fatal("ProcessCPU of a process that does not exist succeeded")
	}
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		after, err := ProcessCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
		for i := 0; i < 1e6; i++ { // burn CPU until a tick is charged
			_ = strings.Repeat("x", i%7)
		}
	}
	t.Fatal("the process's CPU time did not grow while it spun for 5 s")
}

func TestParseMachineStat(t *testing.T) {
	stat := "cpu  1000 10 300 5000 40 5 25 120 0 0\ncpu0 500 5 150 2500 20 2 12 60 0 0\n"
	m, err := parseMachineStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	want := MachineCPU{Busy: 1340 * clockTick, Steal: 120 * clockTick, Total: 6500 * clockTick}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	d := m.Sub(MachineCPU{Busy: 340 * clockTick, Steal: 20 * clockTick, Total: 1500 * clockTick})
	if d.StealShare() != 0.02 {
		t.Errorf("steal share = %v, want 0.02", d.StealShare())
	}
	if (MachineCPU{}).StealShare() != 0 {
		t.Error("steal share of nothing is not 0")
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3"} {
		if _, err := parseMachineStat(bad); err == nil {
			t.Errorf("parseMachineStat(%q) took it", bad)
		}
	}
}

func TestReadMachineCPU(t *testing.T) {
	m, err := ReadMachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	if m.Busy <= 0 || m.Total < m.Busy+m.Steal {
		t.Errorf("implausible machine CPU times %+v", m)
	}
}
