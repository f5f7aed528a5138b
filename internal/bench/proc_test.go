package bench

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestGroupStopsWholeProcessGroup(t *testing.T) {
	g := NewGroup(t.TempDir())
	// The shell starts a child that would outlive a kill of the shell alone.
	p, err := g.Start("sh", exec.Command("sh", "-c", "sleep 300 & echo started; wait"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := WaitReady(ctx, p, 10*time.Second, func(context.Context) error {
		if !strings.Contains(p.LogTail(1), "started") {
			return errors.New("no output yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pgid := p.Pid()
	g.StopAll(5 * time.Second)
	select {
	case <-p.Done():
	default:
		t.Fatal("process still running after StopAll")
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("a process of the group survived StopAll")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWaitReadyReportsEarlyExit(t *testing.T) {
	g := NewGroup(t.TempDir())
	defer g.StopAll(time.Second)
	p, err := g.Start("fails", exec.Command("sh", "-c", "echo boom; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	err = WaitReady(context.Background(), p, 10*time.Second, func(context.Context) error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "fails exited") {
		t.Fatalf("WaitReady=%v, want an error naming the process and quoting its log", err)
	}
}

func TestLookPathNamesPackage(t *testing.T) {
	_, err := LookPath("no-such-program-xyz", "some-package")
	if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), "apt-get install some-package") {
		t.Fatalf("LookPath=%v, want ErrMissingBinary naming the package", err)
	}
}

func TestRunClosed(t *testing.T) {
	calls := 0
	r, err := RunClosed(context.Background(), 1, 50*time.Millisecond, func(ctx context.Context, w int) error {
		calls++
		if calls%2 == 0 {
			return errors.New("even")
		}
		return nil
	})
	if err == nil || r.Errors == 0 || r.Ops == 0 || r.Ops+r.Errors != calls {
		t.Fatalf("RunClosed=%+v, %v after %d calls; want ops and errors counted", r, err, calls)
	}
}
