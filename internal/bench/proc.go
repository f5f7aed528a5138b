package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
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

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago and that no earlier call in this process returned (see package
// freeport: a port picked and closed is not held, so it must not be picked
// again before its server listens).
func FreePorts(n int) ([]int, error) { return freeport.Ports(n) }

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

// Group supervises the long-running server processes of a benchmark. Each
// one runs in its own process group with its output in a log file; StopAll
// stops every group still running.
type Group struct {
	logDir string

	mu    sync.Mutex
	procs []*Proc
}

// NewGroup returns a Group that writes each process's output to
// logDir/NAME.log.
func NewGroup(logDir string) *Group {
	return &Group{logDir: logDir}
}

// Proc is a process started by a Group.
type Proc struct {
	// Name identifies the process in messages and names its log file.
	Name string
	// LogPath is the file holding the process's stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// Start starts cmd (not yet started; its SysProcAttr may carry credentials)
// under name.
func (g *Group) Start(name string, cmd *exec.Cmd) (*Proc, error) {
	logPath := filepath.Join(g.logDir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	isolate(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM to the process group, waits up to grace for the
// process to exit, then kills the group. It returns once the process has
// exited.
func (p *Proc) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = killGroup(p.cmd, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	// The leader may be gone while children of the group linger.
	_ = killGroup(p.cmd, syscall.SIGKILL)
	<-p.done
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// exitError describes how the process ended, with the end of its log.
func (p *Proc) exitError() error {
	return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", p.Name, p.err, p.LogPath, p.LogTail(15))
}

// StopAll stops every process of the group still running, all at once,
// each with the given grace period.
func (g *Group) StopAll(grace time.Duration) {
	g.mu.Lock()
	procs := g.procs
	g.procs = nil
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { p.Stop(grace) })
	}
	wg.Wait()
}

// WaitReady polls check every 20ms until it returns nil. It fails early when
// the process exits (with the end of its log), when ctx ends, or after
// timeout (with check's last error).
func WaitReady(ctx context.Context, p *Proc, timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w; last lines of %s:\n%s", p.Name, timeout, err, p.LogPath, p.LogTail(15))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", p.Name, ctx.Err())
		case <-p.done:
			return p.exitError()
		case <-tick.C:
		}
	}
}

// TCPReady is a readiness check that succeeds once addr accepts a connection.
func TCPReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}
