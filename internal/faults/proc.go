package faults

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Supervisor starts the real processes of a run and guarantees that none of
// them outlives it: every process gets its own process group (signals reach
// its children too) and Close kills every group, paused or not.
type Supervisor struct {
	logDir string
	log    *slog.Logger

	mu     sync.Mutex
	procs  []*Proc
	closed bool
}

// NewSupervisor returns a supervisor whose processes write their output to
// logDir/NAME.log. A nil logger means slog.Default().
func NewSupervisor(logDir string, logger *slog.Logger) (*Supervisor, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	return &Supervisor{logDir: logDir, log: logger.With("component", "supervisor")}, nil
}

// ProcOption configures a Proc.
type ProcOption func(*Proc)

// WithEnv adds environment variables (KEY=VALUE) to the process's
// environment, which otherwise is the supervisor's own.
func WithEnv(kv ...string) ProcOption { return func(p *Proc) { p.env = append(p.env, kv...) } }

// WithStdout sends the process's standard output to w instead of its log
// file (standard error still goes to the log). A fresh writer is asked for
// at every start; the default is the log file.
func WithStdout(w func() io.Writer) ProcOption { return func(p *Proc) { p.stdout = w } }

// Proc is one supervised process that can be started, stopped, killed,
// paused, resumed and restarted with the same command line.
type Proc struct {
	sup    *Supervisor
	name   string
	path   string
	args   []string
	env    []string
	stdout func() io.Writer

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	paused  bool
	logFile *os.File
	starts  int
}

// Add registers a process; it does not start it.
func (s *Supervisor) Add(name, path string, args []string, opts ...ProcOption) *Proc {
	p := &Proc{sup: s, name: name, path: path, args: args}
	for _, o := range opts {
		o(p)
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p
}

// SetArgs replaces the command line used by later starts (an operator
// editing a node's unit file).
func (p *Proc) SetArgs(args []string) {
	p.mu.Lock()
	p.args = append([]string(nil), args...)
	p.mu.Unlock()
}

// Args returns the command line used by the next start.
func (p *Proc) Args() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.args...)
}

// Name returns the process's name (also its log file's base name).
func (p *Proc) Name() string { return p.name }

// LogPath returns the file its output goes to.
func (p *Proc) LogPath() string { return filepath.Join(p.sup.logDir, p.name+".log") }

// Start starts the process. Starting a running process is an error.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("start %s: %w", p.name, ErrRunning)
	}
	p.sup.mu.Lock()
	closed := p.sup.closed
	p.sup.mu.Unlock()
	if closed {
		return fmt.Errorf("start %s: %w", p.name, ErrClosed)
	}
	f, err := os.OpenFile(p.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.name, err)
	}
	p.starts++
	fmt.Fprintf(f, "=== %s start #%d: %s %q\n", time.Now().UTC().Format(time.RFC3339Nano), p.starts, p.path, p.args)
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout = f
	if p.stdout != nil {
		cmd.Stdout = p.stdout()
	}
	cmd.Stderr = f
	// Own process group: the group is signalled as a whole and a Ctrl-C in
	// the terminal reaches only the harness, which then cleans up. The
	// death signal covers a harness that is itself killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	fmt.Fprintf(f, "=== pid %d\n", cmd.Process.Pid)
	done := make(chan struct{})
	p.cmd, p.done, p.paused, p.logFile = cmd, done, false, f
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().UTC().Format(time.RFC3339Nano), err)
		f.Close()
		close(done)
	}()
	p.sup.log.Debug("started", "proc", p.name, "pid", cmd.Process.Pid)
	return nil
}

// Running reports whether the process was started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Pid returns the process id, or 0 when it is not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited returns a channel closed when the current incarnation exits, or nil
// when the process is not started.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Pause stops the whole process group with SIGSTOP.
func (p *Proc) Pause() error { return p.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process group with SIGCONT.
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT, false) }

// Paused reports whether the process was paused and not resumed.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func (p *Proc) signal(sig syscall.Signal, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("signal %s: %w", p.name, ErrNotRunning)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %s %v: %w", p.name, sig, err)
	}
	p.paused = paused
	return nil
}

// Kill sends SIGKILL to the process group (as kill -9 does) and waits for
// the process to exit. Killing a process that is not running is a no-op.
func (p *Proc) Kill() error { return p.stop(syscall.SIGKILL, 0) }

// Stop sends SIGTERM to the process group, and SIGKILL if it has not exited
// after grace. Stopping a process that is not running is a no-op.
func (p *Proc) Stop(grace time.Duration) error { return p.stop(syscall.SIGTERM, grace) }

func (p *Proc) stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, sig)
	if sig != syscall.SIGKILL {
		// A stopped process keeps SIGTERM pending until it continues.
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stop %s: %w", p.name, ErrStuck)
	}
	// Children that left the group's leader behind die with the group.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	p.mu.Lock()
	if p.cmd == cmd {
		p.cmd, p.paused = nil, false
	}
	p.mu.Unlock()
	return nil
}

// Restart kills the process (SIGKILL) and starts it again with the same
// command line.
func (p *Proc) Restart() error {
	if err := p.Kill(); err != nil {
		return err
	}
	return p.Start()
}

// Close kills every process of the supervisor, paused or not, and refuses
// later starts. It is safe to call more than once.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	s.closed = true
	procs := append([]*Proc(nil), s.procs...)
	s.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if err := p.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
