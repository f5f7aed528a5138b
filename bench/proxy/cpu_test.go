package main

import (
	"os"
	"testing"
)

func TestParseSwitches(t *testing.T) {
	status := "Name:\tfencegate\nState:\tS (sleeping)\nThreads:\t7\nvoluntary_ctxt_switches:\t1200\nnonvoluntary_ctxt_switches:\t34\n"
	if n, err := parseSwitches(status); err != nil || n != 1234 {
		t.Errorf("parseSwitches = %d, %v; want 1234", n, err)
	}
	for _, bad := range []string{"Name:\tx\n", "voluntary_ctxt_switches:\t1\n", "voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"} {
		if _, err := parseSwitches(bad); err == nil {
			t.Errorf("parseSwitches(%q) gave no error", bad)
		}
	}
}

// middleSwitches reads this very process's threads.
func TestMiddleSwitches(t *testing.T) {
	if n, err := middleSwitches(os.Getpid()); err != nil || n == 0 {
		t.Errorf("middleSwitches(self) = %d, %v; want a count", n, err)
	}
	if n, err := middleSwitches(0); err != nil || n != 0 {
		t.Errorf("middleSwitches(0) = %d, %v; want 0 (direct path)", n, err)
	}
}
