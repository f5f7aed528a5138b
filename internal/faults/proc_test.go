package faults

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// procState reads the state letter (R, S, T...) of pid from /proc.
func procState(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "", fmt.Errorf("bad stat %q", s)
	}
	return s[i+2 : i+3], nil
}

// gone reports nil when pid has exited (a zombie awaiting its reaper counts
// as exited).
func gone(pid int) error {
	if err := syscall.Kill(pid, 0); err != nil {
		return nil
	}
	if st, err := procState(pid); err != nil || st == "Z" {
		return nil
	}
	return fmt.Errorf("process %d still alive", pid)
}

func TestSupervisorLifecycle(t *testing.T) {
	dir := t.TempDir()
	sup, err := NewSupervisor(dir, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	// The shell starts a child in the background: killing the group must
	// take the child too.
	p := sup.Add("sleeper", "/bin/sh", []string{"-c", "sleep 300 & echo child $!; wait"})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Start() = %v, want ErrRunning", err)
	}
	var child int
	testutil.WaitFor(t, 10*time.Second, "child pid in log", func() error {
		b, err := os.ReadFile(p.LogPath())
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "child "); ok {
				child, err = strconv.Atoi(v)
				return err
			}
		}
		return fmt.Errorf("no child line yet")
	})

	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "child stopped", func() error {
		if st, err := procState(child); err != nil || st != "T" {
			return fmt.Errorf("state %q, %v", st, err)
		}
		return nil
	})
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "child continued", func() error {
		if st, err := procState(child); err != nil || st == "T" {
			return fmt.Errorf("state %q, %v", st, err)
		}
		return nil
	})

	first := p.Pid()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p.Pid() == first || !p.Running() {
		t.Fatalf("after Restart pid=%d (was %d) running=%v", p.Pid(), first, p.Running())
	}
	testutil.WaitFor(t, 10*time.Second, "child of the killed group gone", func() error {
		return gone(child)
	})

	// Close kills even a paused process and refuses new starts.
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if err := sup.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gone(pid); err != nil {
		t.Fatalf("after Close: %v", err)
	}
	if err := p.Start(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start() after Close = %v, want ErrClosed", err)
	}
	log, _ := os.ReadFile(p.LogPath())
	if got := strings.Count(string(log), "start #"); got != 2 {
		t.Fatalf("log has %d start headers, want 2:\n%s", got, log)
	}
}
