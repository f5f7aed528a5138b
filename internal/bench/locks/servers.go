package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/internal/freeport"
)

// redisProc is a redis-server started by the benchmark, without persistence.
type redisProc struct {
	addr string
	cmd  *exec.Cmd
}

// startRedis starts n redis-server processes on free loopback ports and
// waits until each answers PING.
func startRedis(ctx context.Context, n int) ([]*redisProc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH: install the redis-server package")
	}
	var procs []*redisProc
	for range n {
		port, err := freePort()
		if err != nil {
			stopRedis(procs)
			return nil, err
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			stopRedis(procs)
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		p := &redisProc{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
		procs = append(procs, p)
		if err := waitPing(ctx, p.addr); err != nil {
			stopRedis(procs)
			return nil, err
		}
	}
	return procs, nil
}

func stopRedis(procs []*redisProc) {
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// quietLogger drops go-redis's own log lines (dial failures while a server
// starts are expected).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func waitPing(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis-server on %s did not answer: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort() (int, error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
