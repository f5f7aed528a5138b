package servers

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/proc"
)

// server is a server started as a child, alone in its proc.Group, its
// output kept in memory for the error that says why it did not come up.
type server struct {
	g *proc.Group
	p *proc.Proc
}

// startServer starts path with args (setup, when set, adjusts the command:
// credentials, working directory) and waits up to timeout until ready
// succeeds. On error nothing is left running.
func startServer(ctx context.Context, name, path string, args []string, setup func(*exec.Cmd) error,
	timeout time.Duration, ready func(context.Context) error) (*server, error) {
	g, err := proc.New("", nil)
	if err != nil {
		return nil, err
	}
	var opts []proc.Option
	if setup != nil {
		opts = append(opts, proc.WithSetup(setup))
	}
	p, err := g.Start(name, path, args, opts...)
	if err != nil {
		_ = g.Close()
		return nil, err
	}
	if err := p.WaitReady(ctx, 50*time.Millisecond, timeout, ready); err != nil {
		_ = g.Close()
		return nil, err
	}
	return &server{g: g, p: p}, nil
}

// stop sends sig to the server's process group, waits up to grace, then
// kills the group.
func (s *server) stop(sig syscall.Signal, grace time.Duration) error {
	err := s.p.StopWith(sig, grace)
	return errors.Join(err, s.g.Close())
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
