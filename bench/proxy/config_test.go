package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestFencedScript(t *testing.T) {
	want := "BEGIN;\nSELECT fencegate.fence('acct:' || :aid::text, :tok::bigint);\nUPDATE fenced_accounts SET abalance"
	if !strings.Contains(fencedScript, want) {
		t.Errorf("fencedScript lacks %q:\n%s", want, fencedScript)
	}
}

func TestWorkloadArgs(t *testing.T) {
	sc := scripts{fenced: "f.sql"}
	w, _ := findWorkload("fenced-write")
	if got, want := w.pgbenchArgs(sc), []string{"-M", "extended", "-f", "f.sql"}; !slices.Equal(got, want) {
		t.Errorf("args of fenced-write=%v, want %v", got, want)
	}
	s, _ := findWorkload("select-simple")
	if got, want := s.pgbenchArgs(sc), []string{"-M", "simple", "-S"}; !slices.Equal(got, want) {
		t.Errorf("args of select-simple=%v, want %v", got, want)
	}
}

func TestRotate(t *testing.T) {
	xs := []string{"a", "b", "c"}
	for r, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := rotate(xs, r); !slices.Equal(got, want) {
			t.Errorf("rotate(%v, %d)=%v, want %v", xs, r, got, want)
		}
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions(nil, io.Discard)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if !slices.Equal(o.Concurrency, []int{1, 8}) || o.Runs != 3 || o.scale != 10 || len(o.workloads) != 3 {
		t.Errorf("defaults=%+v", o)
	}
	for _, bad := range [][]string{
		{"--workloads", "select-simple,nope"},
		{"--systems", "direct,mysql"},
		{"--scale", "0"},
		{"--runs", "0"},
		{"extra"},
	} {
		if _, err := parseOptions(bad, io.Discard); err == nil {
			t.Errorf("parseOptions(%v) accepted", bad)
		}
	}
}
