package proc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/proc"
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

func TestLifecycle(t *testing.T) {
	dir := t.TempDir()
	sup, err := proc.New(dir, testutil.Logger(t))
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
	if err := p.Start(); !errors.Is(err, proc.ErrRunning) {
		t.Fatalf("second Start() = %v, want proc.ErrRunning", err)
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
	if err := p.Start(); !errors.Is(err, proc.ErrClosed) {
		t.Fatalf("Start() after Close = %v, want ErrClosed", err)
	}
	log, _ := os.ReadFile(p.LogPath())
	if got := strings.Count(string(log), "start #"); got != 2 {
		t.Fatalf("log has %d start headers, want 2:\n%s", got, log)
	}
}

func TestStopAllStopsWholeProcessGroup(t *testing.T) {
	g := proc.ForTest(t)
	// The shell starts a child that would outlive a kill of the shell alone.
	p, err := g.Start("sh", "sh", []string{"-c", "sleep 300 & echo started; wait"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(context.Background(), 20*time.Millisecond, 10*time.Second, func(context.Context) error {
		if !strings.Contains(p.LogTail(3), "started") {
			return errors.New("no output yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pgid := p.Pid()
	if err := g.StopAll(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("process still running after StopAll")
	}
	testutil.WaitFor(t, 5*time.Second, "every process of the group gone", func() error {
		if syscall.Kill(-pgid, 0) == nil {
			return errors.New("a process of the group survived StopAll")
		}
		return nil
	})
}

func TestWaitReadyReportsEarlyExit(t *testing.T) {
	for _, dir := range []string{t.TempDir(), ""} {
		g, err := proc.New(dir, testutil.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		p, err := g.Start("fails", "sh", []string{"-c", "echo boom; exit 3"})
		if err != nil {
			t.Fatal(err)
		}
		err = p.WaitReady(context.Background(), 20*time.Millisecond, 10*time.Second, func(context.Context) error { return errors.New("not yet") })
		if !errors.Is(err, proc.ErrExited) || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "fails proc: process exited") {
			t.Fatalf("log dir %q: WaitReady=%v, want ErrExited naming the process and quoting its output", dir, err)
		}
		var ee *exec.ExitError
		if !errors.As(p.Err(), &ee) || ee.ExitCode() != 3 {
			t.Fatalf("Err()=%v, want exit status 3", p.Err())
		}
	}
}

func TestWaitStoppedAndOnExit(t *testing.T) {
	g := proc.ForTest(t)
	exited := make(chan error, 1)
	var out strings.Builder
	var mu sync.Mutex
	p, err := g.Start("cat", "cat", nil,
		proc.WithStdout(func() io.Writer {
			return writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(b) })
		}),
		proc.WithSetup(func(cmd *exec.Cmd) error { cmd.Stdin = strings.NewReader("hello\n"); return nil }),
		proc.OnExit(func(_ *proc.Proc, err error) { exited <- err }))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(context.Background(), 0); err != nil {
		t.Fatalf("Wait()=%v", err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("proc.OnExit got %v", err)
	}
	mu.Lock()
	got := out.String()
	mu.Unlock()
	if got != "hello\n" {
		t.Fatalf("stdout %q, want hello", got)
	}

	s, err := g.Start("sleep", "sleep", []string{"300"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitStopped(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if st := proc.State(s.Pid()); !strings.HasPrefix(st, "T") {
		t.Fatalf("state %q after WaitStopped, want T", st)
	}
}

func TestCloseWhenDone(t *testing.T) {
	g, err := proc.New("", testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	g.CloseWhenDone(ctx)
	p, err := g.Start("sleep", "sleep", []string{"300"})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := p.Wait(context.Background(), 30*time.Second); err == nil {
		t.Fatal("sleep exited cleanly; want killed")
	}
	testutil.WaitFor(t, 10*time.Second, "the group closed", func() error {
		if _, err := g.Start("again", "true", nil); !errors.Is(err, proc.ErrClosed) {
			return fmt.Errorf("Start()=%v, want ErrClosed", err)
		}
		return nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
