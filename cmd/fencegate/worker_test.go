package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The worker command runs, but the usage does not list it: fencegate starts
// it itself.
func TestWorkerHidden(t *testing.T) {
	var stdout, stderr bytes.Buffer
	run(context.Background(), []string{"--help"}, &stdout, &stderr)
	if strings.Contains(stderr.String(), "  worker ") {
		t.Errorf("the usage lists the hidden worker command:\n%s", stderr.String())
	}
	for _, args := range [][]string{{"worker"}, {"worker", "no-such-kind"}} {
		stderr.Reset()
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", strings.Join(args, " "), code, stderr.String())
		}
	}
}
