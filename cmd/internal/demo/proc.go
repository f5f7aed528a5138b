package demo

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/worker"
	"github.com/fencegate/fencegate/internal/proc"
)

// clientProc is a running client process and the events it reported, each
// stamped with the time the demo received it.
type clientProc struct {
	name   string
	g      *proc.Group
	p      *proc.Proc
	stdin  io.WriteCloser
	events chan stamped // closed once the process exited and its output is read
	// stuck, when set, describes the world around a client that stopped
	// answering (the other client, the database sessions); it runs before
	// the stuck client is asked for its stacks, while all still stand.
	stuck func() string
}

type stamped struct {
	worker.Event
	at time.Time
}

func startClient(binary string, c *ClientConfig) (*clientProc, error) {
	g, err := proc.New("", nil)
	if err != nil {
		return nil, err
	}
	cp := &clientProc{name: c.Name, g: g, events: make(chan stamped, 16)}
	cfgEnv, err := worker.Env(c)
	if err != nil {
		_ = g.Close()
		return nil, err
	}
	env := []string{cfgEnv}
	if c.Password != "" {
		env = append(env, "PGPASSWORD="+c.Password)
	}
	cp.p, err = g.Start(c.Name, binary, worker.Args(worker.DemoClient),
		proc.WithEnv(env...),
		proc.WithSetup(func(cmd *exec.Cmd) (err error) {
			cp.stdin, err = cmd.StdinPipe()
			return err
		}),
		proc.WithStdoutLines(func(line []byte) {
			if e, ok := worker.Decode(line); ok {
				cp.events <- stamped{e, time.Now()}
			}
		}),
		proc.OnExit(func(*proc.Proc, error) { close(cp.events) }))
	if err != nil {
		_ = g.Close()
		return nil, err
	}
	return cp, nil
}

// output is what the client wrote to its standard error.
func (p *clientProc) output() string { return p.p.LogTail(1 << 20) }

// next waits for the client's next event; it must be one of want.
func (p *clientProc) next(ctx context.Context, timeout time.Duration, want ...string) (stamped, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case e, ok := <-p.events:
		if !ok {
			<-p.p.Exited()
			return stamped{}, fmt.Errorf("%w: %s exited (%v) before %v: %s", ErrClient, p.name, p.p.Err(), want, p.output())
		}
		for _, w := range want {
			if e.Kind == w {
				return e, nil
			}
		}
		if e.Kind == evFailed {
			return e, fmt.Errorf("%w: %s: %s", ErrClient, p.name, e.Err)
		}
		return e, fmt.Errorf("%w: %s reported %q, want one of %v", ErrClient, p.name, e.Kind, want)
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
	_ = p.p.Signal(syscall.SIGCONT) // a stopped process cannot dump
	_ = p.p.Signal(syscall.SIGQUIT)
	deadline := time.After(5 * time.Second)
wait:
	for {
		select {
		case _, ok := <-p.events:
			if !ok {
				<-p.p.Exited()
				break wait
			}
		case <-deadline:
			return "; it did not answer SIGQUIT"
		}
	}
	out := p.output()
	if i := strings.Index(out, "\ngoroutine 1 ["); i >= 0 {
		out = out[i+1:] // skip the runtime's register dump
	}
	const max = 16 << 10
	if len(out) > max {
		out = out[:max] + "\n[...]"
	}
	return "; its goroutines:\n" + out
}

// state is the process's scheduler state as Linux reports it.
func (p *clientProc) state() string { return proc.State(p.p.Pid()) }

func (p *clientProc) send(cmd string) error {
	_, err := io.WriteString(p.stdin, cmd+"\n")
	return err
}

func (p *clientProc) signal(sig syscall.Signal) error { return p.p.Signal(sig) }

// pause stops the process and returns once every one of its threads is
// stopped: only then may the demo act on the pause (see
// proc.Proc.WaitStopped).
func (p *clientProc) pause(timeout time.Duration) error {
	if err := p.p.Pause(); err != nil {
		return err
	}
	return p.p.WaitStopped(timeout)
}

// kill ends the process if it still runs (a stopped one too) and waits.
func (p *clientProc) kill() {
	_ = p.p.Signal(syscall.SIGKILL)
	for range p.events {
	}
	_ = p.g.Close()
}

// wait waits for a normal exit.
func (p *clientProc) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-p.p.Exited():
		if err := p.p.Err(); err != nil {
			return fmt.Errorf("%w: %s: %v: %s", ErrClient, p.name, err, p.output())
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%w: %s did not exit within %v", ErrClient, p.name, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
