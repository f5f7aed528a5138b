package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionFrom(t *testing.T) {
	cases := []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"installed tag", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.4.0"}},
			"fencegate v0.4.0 go1.26.0"},
		{"checkout", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"fencegate (devel) commit 0123456789ab+dirty (2026-12-01T10:00:00Z) go1.26.0"},
		{"no version", debug.BuildInfo{GoVersion: "go1.26.0"}, "fencegate (devel) go1.26.0"},
	}
	for _, c := range cases {
		if got := versionFrom(&c.info); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

// TestVersionFlag runs the built binary as a user would.
func TestVersionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: not in -short")
	}
	bin := filepath.Join(t.TempDir(), "fencegate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build fencegate: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("fencegate %s: %v\n%s", args[0], err, out)
		}
		line := strings.TrimSpace(string(out))
		if !strings.HasPrefix(line, "fencegate ") || !strings.Contains(line, " go1.") || strings.Count(line, "\n") > 0 {
			t.Errorf("fencegate %s printed %q, want one line \"fencegate VERSION [commit REV] GOVERSION\"", args[0], line)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"version", "extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("version with an argument: exit %d, want 2 (stderr %q)", code, stderr.String())
	}
}
