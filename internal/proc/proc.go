// Package proc supervises the real processes of the harness: the servers a
// demo, the fault campaign, the benchmarks and "fencegate dev" start, and the
// client processes the demos drive.
//
// A Group starts each process in a process group of its own (a signal
// reaches its children too, and a Ctrl-C in the terminal reaches only the
// harness, which then stops them in order), has the kernel kill it if the
// harness dies (Pdeathsig), and captures its output in a log file, or in
// memory when the group has no log directory. A Proc can be started,
// signalled, paused, resumed, stopped, killed and restarted with the same
// command line. Group.Close kills every process, paused or not; ForTest and
// CloseWhenDone tie that to a test's end or a context's.
//
// Every goroutine the package starts (one per running process, waiting for
// its exit, and the one of CloseWhenDone) is owned by its Group, and Close
// returns once they are gone.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
)

var (
	// ErrRunning is returned when starting a process that already runs.
	ErrRunning = errors.New("proc: process already running")
	// ErrNotRunning is returned when signalling a process that is not running.
	ErrNotRunning = errors.New("proc: process not running")
	// ErrClosed is returned when starting a process after its group closed.
	ErrClosed = errors.New("proc: group closed")
	// ErrStuck is returned when a killed process did not exit.
	ErrStuck = errors.New("proc: process did not exit")
	// ErrExited is wrapped by WaitReady's error when the process exited
	// before it was ready.
	ErrExited = errors.New("proc: process exited")
)

// memLogMax bounds a log kept in memory: past it, the oldest half goes.
const memLogMax = 1 << 20

// Group starts processes and guarantees that none of them outlives it.
type Group struct {
	logDir string
	log    *slog.Logger

	mu     sync.Mutex
	procs  []*Proc
	closed bool
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
}

// New returns a group whose processes write their output to logDir/NAME.log
// (created if missing), or to memory when logDir is "". A nil logger means
// slog.Default().
func New(logDir string, logger *slog.Logger) (*Group, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if logDir != "" {
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return nil, fmt.Errorf("create log dir: %w", err)
		}
	}
	return &Group{logDir: logDir, log: logger.With("component", "proc"), done: make(chan struct{})}, nil
}

// ForTest returns a group logging to a directory of the test's, closed
// when the test ends.
func ForTest(t testing.TB) *Group {
	t.Helper()
	g, err := New(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// CloseWhenDone closes the group when ctx ends (a signal, a deadline),
// unless Close came first.
func (g *Group) CloseWhenDone(ctx context.Context) {
	g.wg.Go(func() {
		select {
		case <-ctx.Done():
			_ = g.killAll()
		case <-g.done:
		}
	})
}

// Option configures a Proc.
type Option func(*Proc)

// WithEnv adds environment variables (KEY=VALUE) to the process's
// environment, which otherwise is the harness's own.
func WithEnv(kv ...string) Option { return func(p *Proc) { p.env = append(p.env, kv...) } }

// WithStdout sends the process's standard output to w instead of its log
// (standard error still goes to the log). A fresh writer is asked for at
// every start.
func WithStdout(w func() io.Writer) Option { return func(p *Proc) { p.stdout = w } }

// WithStdoutLines calls f with each complete line the process writes to
// its standard output (without the newline; f must not keep the slice),
// instead of writing it to the log. Lines of one incarnation come in order,
// from one goroutine; the last has been handed to f before OnExit runs.
func WithStdoutLines(f func(line []byte)) Option {
	return WithStdout(func() io.Writer { return &lineWriter{f: f} })
}

// lineWriter calls f with each complete line written to it.
type lineWriter struct {
	buf []byte
	f   func([]byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.f(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// WithSetup has setup adjust the command before each start: credentials in
// SysProcAttr (the package keeps them and adds its own fields), a working
// directory, pipes (cmd.StdinPipe; standard output is better taken with
// WithStdout, as Wait runs concurrently).
func WithSetup(setup func(*exec.Cmd) error) Option { return func(p *Proc) { p.setup = setup } }

// OnExit has fn called with the process and the exit error of each
// incarnation, after its output is all written and before Exited's channel
// closes.
func OnExit(fn func(p *Proc, err error)) Option { return func(p *Proc) { p.onExit = fn } }

// Proc is one supervised process.
type Proc struct {
	g      *Group
	name   string
	path   string
	args   []string
	env    []string
	stdout func() io.Writer
	setup  func(*exec.Cmd) error
	onExit func(*Proc, error)

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // of the last incarnation, set before done closes
	paused bool
	starts int
	mem    *memLog
}

// Add registers a process; it does not start it.
func (g *Group) Add(name, path string, args []string, opts ...Option) *Proc {
	p := &Proc{g: g, name: name, path: path, args: args}
	for _, o := range opts {
		o(p)
	}
	if g.logDir == "" {
		p.mem = &memLog{}
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	return p
}

// Start adds a process and starts it.
func (g *Group) Start(name, path string, args []string, opts ...Option) (*Proc, error) {
	p := g.Add(name, path, args, opts...)
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
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

// LogPath returns the file its output goes to, "" when kept in memory.
func (p *Proc) LogPath() string {
	if p.g.logDir == "" {
		return ""
	}
	return filepath.Join(p.g.logDir, p.name+".log")
}

// Start starts the process. Starting a running process is an error.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("start %s: %w", p.name, ErrRunning)
	}
	g := p.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("start %s: %w", p.name, ErrClosed)
	}
	var out io.Writer = p.mem
	var f *os.File
	if p.mem == nil {
		var err error
		if f, err = os.OpenFile(p.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return fmt.Errorf("open log of %s: %w", p.name, err)
		}
		out = f
	}
	closeLog := func() {
		if f != nil {
			f.Close()
		}
	}
	p.starts++
	fmt.Fprintf(out, "=== %s start #%d: %s %q\n", time.Now().UTC().Format(time.RFC3339Nano), p.starts, p.path, p.args)
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = out, out
	if p.stdout != nil {
		cmd.Stdout = p.stdout()
	}
	if p.setup != nil {
		if err := p.setup(cmd); err != nil {
			closeLog()
			return fmt.Errorf("start %s: %w", p.name, err)
		}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Own process group: the group is signalled as a whole and a Ctrl-C in
	// the terminal reaches only the harness, which then cleans up. The
	// death signal covers a harness that is itself killed.
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		closeLog()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	fmt.Fprintf(out, "=== pid %d\n", cmd.Process.Pid)
	done := make(chan struct{})
	p.cmd, p.done, p.paused, p.err = cmd, done, false, nil
	g.wg.Go(func() {
		err := cmd.Wait()
		fmt.Fprintf(out, "=== %s exit: %v\n", time.Now().UTC().Format(time.RFC3339Nano), err)
		closeLog()
		if p.onExit != nil {
			p.onExit(p, err)
		}
		p.mu.Lock()
		if p.done == done {
			p.err = err
		}
		p.mu.Unlock()
		close(done)
	})
	g.log.Debug("started", "proc", p.name, "pid", cmd.Process.Pid)
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

// Pid returns the process id, or 0 when it is not started.
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

// Err returns how the last incarnation ended (nil while it runs or after a
// clean exit).
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Wait waits for the current incarnation to exit and returns its exit
// error, or gives up after timeout (timeout <= 0: only ctx bounds it).
func (p *Proc) Wait(ctx context.Context, timeout time.Duration) error {
	done := p.Exited()
	if done == nil {
		return fmt.Errorf("wait for %s: %w", p.name, ErrNotRunning)
	}
	var after <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		after = t.C
	}
	select {
	case <-done:
		return p.Err()
	case <-after:
		return fmt.Errorf("%s did not exit within %v", p.name, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Signal sends sig to the process itself (not its group).
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("signal %s: %w", p.name, ErrNotRunning)
	}
	return p.cmd.Process.Signal(sig)
}

// Pause stops the whole process group with SIGSTOP. The kernel stops the
// threads one by one: WaitStopped waits until all are.
func (p *Proc) Pause() error { return p.signalGroup(syscall.SIGSTOP, true) }

// Resume continues a paused process group with SIGCONT.
func (p *Proc) Resume() error { return p.signalGroup(syscall.SIGCONT, false) }

// Paused reports whether the process was paused and not resumed.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func (p *Proc) signalGroup(sig syscall.Signal, paused bool) error {
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

// WaitStopped returns once every thread of the process is stopped (state
// T). kill(SIGSTOP) returns before that: one thread is woken to start the
// group stop, and on a busy machine another can run on for milliseconds,
// long enough to write.
func (p *Proc) WaitStopped(timeout time.Duration) error {
	pid := p.Pid()
	if pid == 0 {
		return fmt.Errorf("wait for %s to stop: %w", p.name, ErrNotRunning)
	}
	return poll.Until(context.Background(), p.name+" to stop after SIGSTOP", time.Millisecond, timeout, func(context.Context) error {
		stopped, err := Stopped(pid)
		switch {
		case err != nil:
			return poll.Abort(err)
		case !stopped:
			return fmt.Errorf("process state %s", State(pid))
		}
		return nil
	})
}

// Stopped reports whether every thread of process pid is in
// state T (stopped), from /proc/PID/task/*/stat.
func Stopped(pid int) (bool, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("read threads of process %d: %w", pid, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			return false, nil // a thread that just exited: look again
		}
		// "TID (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("unexpected %s/%s/stat: %q", dir, t.Name(), b)
		}
		if b[i+2] != 'T' {
			return false, nil
		}
	}
	return true, nil
}

// State is process pid's scheduler state as Linux reports it ("S
// (sleeping)", "T (stopped)", ...), or why it is unknown.
func State(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown: " + err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// Kill sends SIGKILL to the process group (as kill -9 does) and waits for
// the process to exit. Killing a process that is not running is a no-op.
func (p *Proc) Kill() error { return p.StopWith(syscall.SIGKILL, 0) }

// Stop sends SIGTERM to the process group, and SIGKILL if it has not exited
// after grace. Stopping a process that is not running is a no-op.
func (p *Proc) Stop(grace time.Duration) error { return p.StopWith(syscall.SIGTERM, grace) }

// StopWith is Stop with another signal than SIGTERM (SIGINT asks
// PostgreSQL for a fast shutdown).
func (p *Proc) StopWith(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	pgid := cmd.Process.Pid
	select {
	case <-done:
	default:
		_ = syscall.Kill(-pgid, sig)
		if sig != syscall.SIGKILL {
			// A stopped process keeps the signal pending until it continues.
			_ = syscall.Kill(-pgid, syscall.SIGCONT)
			t := time.NewTimer(grace)
			select {
			case <-done:
			case <-t.C:
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			t.Stop()
		}
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			return fmt.Errorf("stop %s: %w", p.name, ErrStuck)
		}
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

// LogTail returns the last n lines of the process's output.
func (p *Proc) LogTail(n int) string {
	var b []byte
	if p.mem != nil {
		b = p.mem.Bytes()
	} else {
		var err error
		if b, err = os.ReadFile(p.LogPath()); err != nil {
			return ""
		}
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

func (p *Proc) where() string {
	if path := p.LogPath(); path != "" {
		return "last lines of " + path
	}
	return "last lines of its output"
}

// checkTimeout bounds one readiness check of WaitReady. A check that cannot
// succeed yet fails at once (connection refused); one that succeeds may be
// slow on a loaded machine: a first session through a new gate connects
// upstream and runs its admission queries, and under a load average of ten
// on two cores that took over a second, every time, until the wait gave up.
const checkTimeout = 5 * time.Second

// WaitReady polls check every interval until it returns nil; each call of
// check gets a context bounded to checkTimeout. It fails early
// when the process exits (wrapping ErrExited, with the end of its output),
// when ctx ends, or after timeout (with check's last error and the end of
// the output).
func (p *Proc) WaitReady(ctx context.Context, interval, timeout time.Duration, check func(context.Context) error) error {
	done := p.Exited()
	err := poll.Until(ctx, p.name+" to be ready", interval, timeout, func(ctx context.Context) error {
		select {
		case <-done:
			return poll.Abort(fmt.Errorf("%s %w (%v); %s:\n%s", p.name, ErrExited, p.Err(), p.where(), p.LogTail(15)))
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		defer cancel()
		return check(cctx)
	})
	if errors.Is(err, poll.ErrTimeout) {
		return fmt.Errorf("%w; %s:\n%s", err, p.where(), p.LogTail(15))
	}
	return err
}

// StopAll stops every process of the group still running, all at once,
// each with the given grace period, and returns once they have exited.
func (g *Group) StopAll(grace time.Duration) error {
	g.mu.Lock()
	procs := append([]*Proc(nil), g.procs...)
	g.mu.Unlock()
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.Stop(grace) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (g *Group) killAll() error {
	g.mu.Lock()
	g.closed = true
	procs := append([]*Proc(nil), g.procs...)
	g.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if err := p.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close kills every process of the group, paused or not, refuses later
// starts, and returns once every goroutine of the group has ended. It is
// safe to call more than once.
func (g *Group) Close() error {
	err := g.killAll()
	g.mu.Lock()
	select {
	case <-g.done:
	default:
		close(g.done)
	}
	g.mu.Unlock()
	g.wg.Wait()
	return err
}

// memLog keeps a process's output in memory, dropping the oldest half past
// memLogMax.
type memLog struct {
	mu sync.Mutex
	b  []byte
}

func (m *memLog) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.b)+len(p) > memLogMax {
		m.b = append(m.b[:0], m.b[len(m.b)/2:]...)
	}
	m.b = append(m.b, p...)
	return len(p), nil
}

// Bytes returns a copy of what was written and kept.
func (m *memLog) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.b...)
}
