package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrMissingBinary is returned by LookPath when a program the benchmark
// drives is not installed.
var ErrMissingBinary = errors.New("bench: program not installed")

// LookPath finds program on PATH, or says which Debian package provides it.
func LookPath(program, debianPackage string) (string, error) {
	p, err := exec.LookPath(program)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found on PATH; install the Debian package %s (apt-get install %s)",
			ErrMissingBinary, program, debianPackage, debianPackage)
	}
	return p, nil
}

// Version runs "program args..." and returns the first line it prints, or a
// note that the version is unknown.
func Version(ctx context.Context, program string, args ...string) string {
	out, err := Command(ctx, program, args...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil || line == "" {
		return "unknown (" + filepath.Base(program) + " " + strings.Join(args, " ") + " failed)"
	}
	return strings.TrimSpace(line)
}

// Command is exec.CommandContext for a short-lived helper program (pgbench,
// a version query): it runs in its own process group, dies with the
// benchmark, and cancelling ctx kills its whole group.
func Command(ctx context.Context, program string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, program, args...)
	isolate(cmd)
	cmd.Cancel = func() error { return killGroup(cmd, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// isolate puts cmd in a process group of its own (so a terminal's Ctrl-C
// reaches only the benchmark, which then stops its children in order) and
// has the kernel kill it if the benchmark itself dies.
func isolate(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

func killGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
