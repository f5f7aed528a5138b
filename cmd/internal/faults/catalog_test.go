package faults

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCatalog: every fault has a distinct name, a description, a positive
// weight and an injection; at least one can double-grant the lock, so a
// random run's first draw can bite.
func TestCatalog(t *testing.T) {
	seen := map[string]bool{}
	holders := 0
	for _, f := range Catalog {
		if f.Name == "" || seen[f.Name] || f.Doc == "" || f.Weight < 1 || f.inject == nil {
			t.Errorf("fault %+v: want a distinct name, a description, a weight >= 1 and an injection", f)
		}
		seen[f.Name] = true
		if f.DoubleHold {
			holders++
		}
	}
	if holders == 0 {
		t.Error("no fault can double-grant the lock by itself")
	}
	if !slices.Equal(AllFaults, names(Catalog)) {
		t.Errorf("AllFaults = %v; want Catalog's names", AllFaults)
	}
}

func names(fs []Fault) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

func TestParseFaults(t *testing.T) {
	for _, in := range []string{"", "all"} {
		if got, err := ParseFaults(in); err != nil || !slices.Equal(got, AllFaults) {
			t.Errorf("ParseFaults(%q) = %v, %v; want every fault", in, got, err)
		}
	}
	if got, err := ParseFaults("kill-proxy, pause-client"); err != nil || !slices.Equal(got, []string{FaultKillProxy, FaultPauseClient}) {
		t.Errorf("ParseFaults = %v, %v", got, err)
	}
	if _, err := ParseFaults("kill-proxy,kill-everything"); !errors.Is(err, ErrUnknownFault) || !strings.Contains(err.Error(), "kill-everything") {
		t.Errorf("ParseFaults of an unknown fault: %v", err)
	}
}

func TestWeightedFaults(t *testing.T) {
	got := weighted([]string{FaultPauseClient, FaultPauseLeader})
	n := 0
	for _, f := range got {
		if f == FaultPauseLeader {
			n++
		}
	}
	if len(got) != 1+faultByName[FaultPauseLeader].Weight || n != faultByName[FaultPauseLeader].Weight || n < 2 {
		t.Fatalf("weighted = %v; want pause-leader as often as its weight, pause-client once", got)
	}
}

// TestFaultHelp: the --faults help names every fault with its description.
func TestFaultHelp(t *testing.T) {
	lines := strings.Split(FaultHelp(), "\n")
	if len(lines) != len(Catalog) {
		t.Fatalf("FaultHelp has %d lines; want one per fault (%d)", len(lines), len(Catalog))
	}
	for i, f := range Catalog {
		if fields := strings.Fields(lines[i]); fields[0] != f.Name || !strings.Contains(lines[i], f.Doc) {
			t.Errorf("FaultHelp line %q; want %s and its description", lines[i], f.Name)
		}
	}
}

// TestDesignListsCatalog: DESIGN.md's table of faults lists exactly
// Catalog's faults, in its order, and its sentence on the first draw names
// exactly the faults that can double-grant the lock.
func TestDesignListsCatalog(t *testing.T) {
	b, err := os.ReadFile("DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, section, ok := strings.Cut(doc, "## Faults, and how each is made\n")
	if !ok {
		t.Fatal(`DESIGN.md lacks the section "Faults, and how each is made"`)
	}
	var listed []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| fault |") {
			if len(listed) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(line, " | ")
		listed = append(listed, strings.Split(strings.TrimPrefix(cells[0], "| "), ", ")...)
	}
	if !slices.Equal(listed, AllFaults) {
		t.Errorf("DESIGN.md's table lists %v;\nCatalog has %v", listed, AllFaults)
	}
	m := regexp.MustCompile(`can double-grant the lock by itself\s+\(([^)]*)\)`).FindStringSubmatch(section)
	if m == nil {
		t.Fatal("DESIGN.md does not name the faults that can double-grant the lock by itself")
	}
	var holders []string
	for _, f := range Catalog {
		if f.DoubleHold {
			holders = append(holders, f.Name)
		}
	}
	if got := strings.Split(m[1], ", "); !slices.Equal(got, holders) {
		t.Errorf("DESIGN.md names %v as double-granting by themselves; Catalog has %v", got, holders)
	}
}
