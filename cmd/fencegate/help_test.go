package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Every command's --help lists its flags, each with its default once, and
// exits 0.
func TestHelpListsFlagsOnce(t *testing.T) {
	for _, args := range [][]string{
		{"proxy"}, {"dev"}, {"demo"}, {"demo", "paused-holder"}, {"demo", "lost-updates"}, {"faults"},
		{"token", "serve"}, {"token", "next"}, {"token", "status"}, {"token", "init"},
		{"token", "snapshot"}, {"token", "restore"}, {"token", "members", "list"},
		{"schema", "install"}, {"schema", "status"}, {"protect"}, {"marks", "show"}, {"marks", "holders"}, {"reap"},
	} {
		name := strings.Join(args, " ")
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append(args, "--help"), &stdout, &stderr)
		if code != 0 {
			t.Errorf("%s --help: exit %d\n%s", name, code, stderr.String())
			continue
		}
		out := stderr.String() + stdout.String()
		if !strings.Contains(out, "\n  -") {
			t.Errorf("%s --help lists no flags:\n%s", name, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%s --help states a default twice: %q", name, line)
			}
		}
	}
}
