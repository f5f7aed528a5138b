package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// selfCommand is how the user runs the fencegate binary that is running
// now, for the commands the stack's banner suggests: "fencegate" when that
// name on PATH is this binary, "go run ./cmd/fencegate" when this binary
// is one 'go run' built, else its path, relative to the working directory
// when under it ("./bin/fencegate" after 'make build').
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "fencegate"
	}
	cwd, _ := os.Getwd()
	onPath, _ := exec.LookPath("fencegate")
	return selfCommandFor(exe, cwd, onPath)
}

// selfCommandFor is selfCommand for the binary exe, run from cwd, with
// onPath the fencegate found on PATH ("" for none).
func selfCommandFor(exe, cwd, onPath string) string {
	exe = resolvePath(exe)
	if onPath != "" && resolvePath(onPath) == exe {
		return "fencegate"
	}
	if strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/fencegate"
	}
	if cwd != "" {
		if rel, err := filepath.Rel(resolvePath(cwd), exe); err == nil && !strings.HasPrefix(rel, "..") {
			return "./" + filepath.ToSlash(rel)
		}
	}
	return exe
}

// resolvePath is p absolute, with symbolic links followed where they can be.
func resolvePath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}
