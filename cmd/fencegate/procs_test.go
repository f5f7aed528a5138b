package main

import (
	"os"
	"runtime"
	"testing"
)

// oneProc sets one P unless GOMAXPROCS says otherwise, and puts the
// previous setting back when it returns.
func TestOneProc(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	procs, restore := oneProc()
	if procs != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("without GOMAXPROCS: oneProc said %d, runtime has %d; want 1", procs, runtime.GOMAXPROCS(0))
	}
	restore()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("after restore: GOMAXPROCS %d, want %d", got, before)
	}

	t.Setenv("GOMAXPROCS", "3")
	procs, restore = oneProc()
	defer restore()
	if procs != before || runtime.GOMAXPROCS(0) != before {
		t.Errorf("with GOMAXPROCS set: oneProc said %d, runtime has %d; want %d untouched", procs, runtime.GOMAXPROCS(0), before)
	}
}
