package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

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
// without persistence. It is killed when the test ends.
type RedisServer struct {
	t    testing.TB
	Port int
	args []string
	cmd  *exec.Cmd
}

// Addr returns "127.0.0.1:PORT".
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// StartRedis starts a redis-server (from PATH) on a free loopback port with no
// persistence; extra arguments are appended to its command line. The test
// fails if redis-server is not installed.
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	s := &RedisServer{t: t, Port: FreePort(t), args: extra}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// Start (re)starts the server on its port and waits until it answers PING.
// A restarted server has lost every key, as a master without persistence does.
func (s *RedisServer) Start() {
	s.t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		s.t.Fatalf("redis-server not found on PATH: install the redis-server package")
	}
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""}, s.args...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
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
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the process with SIGSTOP; Resume continues it.
func (s *RedisServer) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *RedisServer) Resume() { s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Errorf("signal redis-server %d: %v", s.Port, err)
	}
}

// String describes the server for test logs.
func (s *RedisServer) String() string { return fmt.Sprintf("redis-server(%s)", s.Addr()) }
