package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestInstructionsSmoke runs the command small and reads its table back:
// every workload has its row, and the counts say what they must (the fence
// costs instructions, and so do the checks of the protected table).
func TestInstructionsSmoke(t *testing.T) {
	testutil.NeedServices(t)
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Fatal("valgrind is needed (Debian package valgrind)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	err := run(ctx, []string{"--writes", "2", "--rows", "50", "--resources", "3"}, &out, &errs)
	t.Log(errs.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Log(out.String())
	counts := map[string][]int64{}
	for _, line := range strings.Split(out.String(), "\n") {
		for _, name := range []string{"one-row UPDATE transaction", "INSERT ... SELECT of 50 rows, 3 resources",
			"COPY of 50 rows, 3 resources", "UPDATE of 50 rows, 3 resources"} {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			for _, f := range strings.Fields(rest) {
				if n, err := strconv.ParseInt(strings.ReplaceAll(f, ",", ""), 10, 64); err == nil {
					counts[name] = append(counts[name], n)
				}
			}
		}
	}
	if len(counts) != 4 {
		t.Fatalf("rows found: %v, want the one-row transaction and three bulk writes", counts)
	}
	one := counts["one-row UPDATE transaction"]
	if len(one) != 3 || !(0 < one[0] && one[0] < one[1] && one[1] < one[2]) {
		t.Fatalf("one-row counts %v: want unfenced < fenced on the twin < fenced on the protected table", one)
	}
	for name, c := range counts {
		if name != "one-row UPDATE transaction" && (len(c) != 2 || !(0 < c[0] && c[0] < c[1])) {
			t.Fatalf("%s: counts %v, want twin < protected, both positive", name, c)
		}
	}
}

func TestGroup(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 602908: "602,908", 163801598: "163,801,598"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
}
