package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clientProc is a running client process and the events it reported, each
// stamped with the time the demo received it.
type clientProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan stamped
	stderr *bytes.Buffer
	done   chan struct{}
	err    error
	mu     sync.Mutex
	// stuck, when set, describes the world around a client that stopped
	// answering (the other client, the database sessions); it runs before
	// the stuck client is asked for its stacks, while all still stand.
	stuck func() string
}

type stamped struct {
	event
	at time.Time
}

func startClient(binary string, c *ClientConfig) (*clientProc, error) {
	cmd := exec.Command(binary, append([]string{"demo", "client"}, c.args()...)...)
	// Killed with us; in its own process group, so a Ctrl-C reaches only the
	// demo, which then stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if c.Password != "" {
		cmd.Env = append(os.Environ(), "PGPASSWORD="+c.Password)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &clientProc{name: c.Name, cmd: cmd, stdin: stdin, events: make(chan stamped, 16), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				p.events <- stamped{e, time.Now()}
			}
		}
		p.err = cmd.Wait()
		close(p.events)
		close(p.done)
	}()
	return p, nil
}

// next waits for the client's next event; it must be one of want.
func (p *clientProc) next(ctx context.Context, timeout time.Duration, want ...string) (stamped, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case e, ok := <-p.events:
		if !ok {
			<-p.done
			return stamped{}, fmt.Errorf("%w: %s exited (%v) before %v: %s", ErrClient, p.name, p.err, want, p.stderr.String())
		}
		for _, w := range want {
			if e.Event == w {
				return e, nil
			}
		}
		if e.Event == evFailed {
			return e, fmt.Errorf("%w: %s: %s", ErrClient, p.name, e.Error)
		}
		return e, fmt.Errorf("%w: %s reported %q, want one of %v", ErrClient, p.name, e.Event, want)
	case <-t.C:
		var around string
		if p.stuck != nil {
			around = p.stuck()
		}
		return stamped{}, fmt.Errorf("%w: %s: no %v within %v (process state %s)%s%s", ErrClient, p.name, want, timeout, p.state(), around, p.stacks())
	case <-ctx.Done():
		return stamped{}, ctx.Err()
	}
}

// stacks asks a stuck client for its goroutine stacks (SIGQUIT makes a Go
// program print them and exit) and returns them for the error message, so
// that a hang explains itself.
func (p *clientProc) stacks() string {
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot dump
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	deadline := time.After(5 * time.Second)
wait:
	for {
		select {
		case _, ok := <-p.events:
			if !ok {
				<-p.done
				break wait
			}
		case <-deadline:
			return "; it did not answer SIGQUIT"
		}
	}
	out := p.stderr.String()
	if i := strings.Index(out, "\ngoroutine 1 ["); i >= 0 {
		out = out[i+1:] // skip the runtime's register dump
	}
	const max = 16 << 10
	if len(out) > max {
		out = out[:max] + "\n[...]"
	}
	return "; its goroutines:\n" + out
}

// state is the process's scheduler state as Linux reports it ("S
// (sleeping)", "T (stopped)", ...), or why it is unknown.
func (p *clientProc) state() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
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

func (p *clientProc) send(cmd string) error {
	_, err := io.WriteString(p.stdin, cmd+"\n")
	return err
}

func (p *clientProc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// pause stops the process and returns once every one of its threads is
// stopped. kill(SIGSTOP) returns before that: one thread is woken to start
// the group stop, and on a busy machine another thread (say, one that just
// read the demo's go-ahead from stdin) can run on for milliseconds, long
// enough to write. Only once all threads show state T may the demo act on
// the pause.
func (p *clientProc) pause(timeout time.Duration) error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		stopped, err := allThreadsStopped(p.cmd.Process.Pid)
		if err != nil {
			return err
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not stopped %v after SIGSTOP (process state %s)", p.name, timeout, p.state())
		}
		time.Sleep(time.Millisecond)
	}
}

// allThreadsStopped reports whether every thread of process pid is in
// state T (stopped), from /proc/PID/task/*/stat.
func allThreadsStopped(pid int) (bool, error) {
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

// kill ends the process if it still runs (a stopped one too) and waits.
func (p *clientProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	for range p.events {
	}
	<-p.done
}

// wait waits for a normal exit.
func (p *clientProc) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%w: %s: %v: %s", ErrClient, p.name, p.err, p.stderr.String())
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%w: %s did not exit within %v", ErrClient, p.name, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
