package devstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SelfCommand is how the user runs the fencegate binary that is running
// now, for the commands the stack's banner suggests: "fencegate" when that
// name on PATH is this binary, "go run ./cmd/fencegate" when this binary
// is one 'go run' built, else its path, relative to the working directory
// when under it ("./bin/fencegate" after 'make build').
func SelfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "fencegate"
	}
	cwd, _ := os.Getwd()
	onPath, _ := exec.LookPath("fencegate")
	return selfCommand(exe, cwd, onPath)
}

func selfCommand(exe, cwd, onPath string) string {
	exe = resolve(exe)
	if onPath != "" && resolve(onPath) == exe {
		return "fencegate"
	}
	if strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/fencegate"
	}
	if cwd != "" {
		if rel, err := filepath.Rel(resolve(cwd), exe); err == nil && !strings.HasPrefix(rel, "..") {
			return "./" + filepath.ToSlash(rel)
		}
	}
	return exe
}

// resolve is p absolute, with symbolic links followed where they can be.
func resolve(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}
