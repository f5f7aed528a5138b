package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/proc"
)

// redisProc is a redis-server started by the benchmark, without persistence.
type redisProc struct {
	addr string
	p    *proc.Proc
}

// startRedis starts n redis-server processes on free loopback ports under
// g and waits until each answers PING.
func startRedis(ctx context.Context, g *proc.Group, n int) ([]*redisProc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH: install the redis-server package")
	}
	var procs []*redisProc
	for i := range n {
		ports, err := freeport.Ports(1)
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		p, err := g.Start(fmt.Sprintf("redis-%d", i+1), bin, []string{"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""})
		if err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		procs = append(procs, &redisProc{addr: addr, p: p})
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
		err = p.WaitReady(ctx, 20*time.Millisecond, 10*time.Second, func(ctx context.Context) error { return c.Ping(ctx).Err() })
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", addr, err)
		}
	}
	return procs, nil
}

// quietLogger drops go-redis's own log lines (dial failures while a server
// starts are expected).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func waitPing(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	return poll.Until(ctx, "redis-server on "+addr+" to answer PING", 20*time.Millisecond, 10*time.Second,
		func(ctx context.Context) error { return c.Ping(ctx).Err() })
}
