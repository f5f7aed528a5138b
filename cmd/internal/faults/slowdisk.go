package faults

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// blkioRoot is where cgroup v1's blkio controller is mounted.
const blkioRoot = "/sys/fs/cgroup/blkio"

// slowDiskIOPS is the write rate a slowed token node gets: each Raft log
// append ends in an fsync, so a commit then takes about a second.
const slowDiskIOPS = 2

// DiskThrottle slows the writes (and so the fsyncs) of chosen processes to a
// few per second, through a blkio cgroup with a write-IOPS limit on the
// block device that holds a directory. Go programs issue fsync as a raw
// system call, so no LD_PRELOAD trick can stall it; the kernel's throttle
// can. It needs root and cgroup v1's blkio controller.
type DiskThrottle struct {
	dir  string // the cgroup's directory
	home string // the cgroup processes return to
}

// NewDiskThrottle creates a blkio cgroup limiting writes to the device that
// holds dataDir. It fails when the controller is unavailable.
func NewDiskThrottle(dataDir string) (*DiskThrottle, error) {
	if _, err := os.Stat(filepath.Join(blkioRoot, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("%w: no cgroup v1 blkio controller at %s", ErrNoDiskThrottle, blkioRoot)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dataDir, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", dataDir, err)
	}
	major, minor := unix.Major(st.Dev), unix.Minor(st.Dev)
	if major == 0 {
		return nil, fmt.Errorf("%w: %s is not on a block device", ErrNoDiskThrottle, dataDir)
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	d := &DiskThrottle{dir: filepath.Join(blkioRoot, "fencegate-faults-"+hex.EncodeToString(b)), home: ownBlkio()}
	if err := os.Mkdir(d.dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDiskThrottle, err)
	}
	limit := fmt.Sprintf("%d:%d %d", major, minor, slowDiskIOPS)
	if err := os.WriteFile(filepath.Join(d.dir, "blkio.throttle.write_iops_device"), []byte(limit), 0o644); err != nil {
		os.Remove(d.dir)
		return nil, fmt.Errorf("%w: set %q: %v", ErrNoDiskThrottle, limit, err)
	}
	return d, nil
}

// ownBlkio returns the directory of this process's blkio cgroup.
func ownBlkio() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && strings.Contains(","+parts[1]+",", ",blkio,") {
				return filepath.Join(blkioRoot, parts[2])
			}
		}
	}
	return blkioRoot
}

// Slow moves pid into the throttled cgroup.
func (d *DiskThrottle) Slow(pid int) error {
	return os.WriteFile(filepath.Join(d.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// Restore moves pid back to the harness's own cgroup. A process that has
// exited needs no restoring.
func (d *DiskThrottle) Restore(pid int) error {
	err := os.WriteFile(filepath.Join(d.home, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
	if err != nil && syscall.Kill(pid, 0) != nil {
		return nil
	}
	return err
}

// Close moves every remaining process out and removes the cgroup.
func (d *DiskThrottle) Close() error {
	if b, err := os.ReadFile(filepath.Join(d.dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = d.Restore(pid)
			}
		}
	}
	return os.Remove(d.dir)
}
