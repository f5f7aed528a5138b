package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/proc"
	"github.com/redis/go-redis/v9"
)

// DefaultRedisAddr is the shared Redis used when FENCEGATE_TEST_REDIS is unset.
const DefaultRedisAddr = "127.0.0.1:6379"

// RedisAddr returns the address of the shared Redis used by tests.
func RedisAddr() string {
	if v := os.Getenv("FENCEGATE_TEST_REDIS"); v != "" {
		return v
	}
	return DefaultRedisAddr
}

// Redis checks that the shared Redis answers and returns its address and a
// key prefix unique to this test. Keys under the prefix are deleted when the
// test ends. The test fails if Redis is not reachable.
func Redis(t testing.TB) (addr, prefix string) {
	t.Helper()
	NeedServices(t)
	addr = RedisAddr()
	c := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		t.Fatalf("Redis not reachable at %s: %v (start it, or set FENCEGATE_TEST_REDIS)", addr, err)
	}
	prefix = RandomName("fgtest:") + ":"
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return addr, prefix
}

// RedisServer is a redis-server process started by a test on a free port,
// without persistence, under the supervisor of package proc (its own
// process group, its log shown when the test fails). It is killed when the
// test ends.
type RedisServer struct {
	t    testing.TB
	Port int
	p    *proc.Proc
}

// Addr returns "127.0.0.1:PORT".
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// StartRedis starts a redis-server (from PATH) on a free loopback port with no
// persistence; extra arguments are appended to its command line. The test
// fails if redis-server is not installed.
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	NeedServices(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH: install the redis-server package")
	}
	s := &RedisServer{t: t, Port: FreePort(t)}
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""}, extra...)
	g := proc.ForTest(t)
	s.p = g.Add("redis-server-"+strconv.Itoa(s.Port), bin, args)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", s, s.p.LogTail(64<<10))
		}
	})
	s.Start()
	return s
}

// Start (re)starts the server on its port and waits until it answers PING.
// A restarted server has lost every key, as a master without persistence does.
func (s *RedisServer) Start() {
	s.t.Helper()
	if s.p.Running() {
		return
	}
	if err := s.p.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	WaitFor(s.t, 10*time.Second, "redis-server on "+s.Addr(), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	})
}

// Kill stops the server with SIGKILL (losing all keys) and waits for it.
// Killing a stopped server is a no-op.
func (s *RedisServer) Kill() {
	if err := s.p.Kill(); err != nil {
		s.t.Errorf("kill %s: %v", s, err)
	}
}

// Pause stops the process with SIGSTOP; Resume continues it.
func (s *RedisServer) Pause() { s.check(s.p.Pause()) }

// Resume continues a paused server with SIGCONT.
func (s *RedisServer) Resume() { s.check(s.p.Resume()) }

func (s *RedisServer) check(err error) {
	if err != nil {
		s.t.Errorf("signal %s: %v", s, err)
	}
}

// String describes the server for test logs.
func (s *RedisServer) String() string { return fmt.Sprintf("redis-server(%s)", s.Addr()) }
