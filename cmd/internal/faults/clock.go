package faults

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

//go:embed clockshim/fgclock.c
var clockShimSource []byte

// BuildClockShim compiles the clock shim (an LD_PRELOAD library that shifts
// CLOCK_REALTIME, gettimeofday and time by an offset read from a file) into
// dir and returns the path of the shared object. It needs a C compiler (cc).
//
// The shim exists because Debian's libfaketime cannot run Debian's
// redis-server: the latter is linked with jemalloc, and the two recurse into
// each other during start-up (libfaketime issue #130), so redis hangs.
func BuildClockShim(dir string) (string, error) {
	src := filepath.Join(dir, "fgclock.c")
	so := filepath.Join(dir, "fgclock.so")
	if err := os.WriteFile(src, clockShimSource, 0o644); err != nil {
		return "", fmt.Errorf("write clock shim source: %w", err)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("%w: no C compiler (cc) on PATH: install gcc", ErrNoClockShim)
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", so, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: %v: %s", ErrNoClockShim, err, out)
	}
	return so, nil
}

// Clock is the wall-clock offset of one process running under the clock
// shim. Set changes it while the process runs.
type Clock struct {
	shim string
	path string
}

// NewClock creates the offset file at path (offset zero) for a process that
// will run with the shim at shimPath.
func NewClock(shimPath, path string) (*Clock, error) {
	c := &Clock{shim: shimPath, path: path}
	if err := c.Set(0); err != nil {
		return nil, err
	}
	return c, nil
}

// Env returns the environment variables that put a process under the clock.
func (c *Clock) Env() []string {
	return []string{"LD_PRELOAD=" + c.shim, "FENCEGATE_CLOCK_FILE=" + c.path}
}

// Set makes the process's wall clock read real time plus d, at once.
func (c *Clock) Set(d time.Duration) error {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(int64(d)))
	f, err := os.OpenFile(c.path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open clock file: %w", err)
	}
	if _, err := f.WriteAt(b[:], 0); err != nil {
		f.Close()
		return fmt.Errorf("write clock file: %w", err)
	}
	return f.Close()
}
