package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The banner names the binary as the user can run it: after 'make dev'
// (bin/fencegate, not on PATH) as ./bin/fencegate, never as a bare
// "fencegate" that the shell would not find.
func TestSelfCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "fencegate")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "fencegate")
	for _, tc := range []struct {
		name, exe, cwd, onPath, want string
	}{
		{"make dev: bin/fencegate, none on PATH", bin, dir, "", "./bin/fencegate"},
		{"make dev: another fencegate on PATH", bin, dir, other, "./bin/fencegate"},
		{"the one on PATH", bin, dir, bin, "fencegate"},
		{"go run", "/tmp/go-build123/b001/exe/fencegate", dir, "", "go run ./cmd/fencegate"},
		{"elsewhere", bin, t.TempDir(), "", bin},
	} {
		if got := selfCommandFor(tc.exe, tc.cwd, tc.onPath); got != tc.want {
			t.Errorf("%s: selfCommandFor = %q; want %q", tc.name, got, tc.want)
		}
	}
}
