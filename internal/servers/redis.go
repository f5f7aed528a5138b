package servers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/redis/go-redis/v9"
)

// DefaultRedisAddr is the local Redis tried when neither a flag nor the
// environment names one.
const DefaultRedisAddr = "127.0.0.1:6379"

// Redis is a Redis server the stack uses.
type Redis struct {
	// Addr is host:port.
	Addr string
	// Options connect to it (password and database included).
	Options *redis.Options
	// Source says where it came from, as Postgres.Source does.
	Source string
	srv    *server
}

// Started reports whether the server was started by FindRedis or StartRedis.
func (r *Redis) Started() bool { return r.srv != nil }

// Close stops a server this package started; it does nothing otherwise.
func (r *Redis) Close() error {
	if r == nil || r.srv == nil {
		return nil
	}
	return r.srv.stop(syscall.SIGTERM, 5*time.Second)
}

// Kill stops a started server with SIGKILL, losing every key (a master
// restarted without persistence); Restart brings it back on the same port.
func (r *Redis) Kill() error {
	if r.srv == nil {
		return fmt.Errorf("kill redis %s: not started by fencegate", r.Addr)
	}
	return r.srv.stop(syscall.SIGKILL, 5*time.Second)
}

// Restart starts a killed server again on its address, empty.
func (r *Redis) Restart(ctx context.Context) error {
	nr, err := StartRedis(ctx, r.Addr, "")
	if err != nil {
		return err
	}
	r.srv = nr.srv
	return nil
}

// RedisOptions says where to look for Redis.
type RedisOptions struct {
	// URL, when set, is used as is: host:port or redis://...
	URL string
	// Setting names the caller's setting that gives URL, in error messages
	// and as Redis.Source. The default is "RedisOptions.URL".
	Setting string
	// DataDir is the working directory of a started server (DataDir/redis).
	DataDir string
	// Getenv reads the environment. The default is os.Getenv.
	Getenv func(string) string
	// Logger gets progress messages. The default is slog.Default().
	Logger *slog.Logger
}

// FindRedis returns the Redis server to use, starting one when none answers.
func FindRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	if o.Setting == "" {
		o.Setting = "RedisOptions.URL"
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.Default().With("component", "devstack")
	}
	try := func(url, from string) (*Redis, error) {
		opts, err := ParseRedis(url)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoRedis, from, err)
		}
		if err := PingRedis(ctx, opts); err != nil {
			return nil, err
		}
		return &Redis{Addr: opts.Addr, Options: opts, Source: from}, nil
	}
	if o.URL != "" {
		r, err := try(o.URL, o.Setting)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s does not answer: %v", ErrNoRedis, o.Setting, o.URL, err)
		}
		return r, nil
	}
	if v := o.Getenv("REDIS_URL"); v != "" {
		r, err := try(v, "REDIS_URL")
		if err != nil {
			return nil, fmt.Errorf("%w: REDIS_URL names %s, which does not answer: %v (fix it, unset it, or pass %s)", ErrNoRedis, v, err, o.Setting)
		}
		return r, nil
	}
	if r, err := try(DefaultRedisAddr, "local server"); err == nil {
		return r, nil
	}
	addr := DefaultRedisAddr
	if !PortFree(addr) {
		addrs, err := freeport.Loopback(1)
		if err != nil {
			return nil, err
		}
		addr = addrs[0]
	}
	r, err := StartRedis(ctx, addr, o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("%w: nothing answers at %s and %v; install Redis (Debian/Ubuntu: apt-get install redis-server) or pass %s host:port", ErrNoRedis, DefaultRedisAddr, err, o.Setting)
	}
	o.Logger.Info("started Redis", "addr", r.Addr)
	return r, nil
}

// StartRedis starts a redis-server from PATH on addr without persistence
// (dir, when set, is its working directory) and waits until it answers.
func StartRedis(ctx context.Context, addr, dir string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no redis-server on PATH")
	}
	var workDir string
	if dir != "" {
		workDir = filepath.Join(dir, "redis")
		if err := os.MkdirAll(workDir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", workDir, err)
		}
	}
	opts := &redis.Options{Addr: addr}
	srv, err := startServer(ctx, "redis-server "+addr, bin, RedisArgs(addr),
		func(cmd *exec.Cmd) error { cmd.Dir = workDir; return nil },
		15*time.Second, func(ctx context.Context) error { return PingRedis(ctx, opts) })
	if err != nil {
		return nil, err
	}
	return &Redis{Addr: addr, Options: opts, Source: "started by fencegate", srv: srv}, nil
}

// StartMasters starts n Redis servers without persistence on free
// loopback ports, for Redlock. On error it returns those it started, for
// the caller to close.
func StartMasters(ctx context.Context, n int) ([]*Redis, error) {
	addrs, err := freeport.Loopback(n)
	if err != nil {
		return nil, err
	}
	var out []*Redis
	for i, addr := range addrs {
		r, err := StartRedis(ctx, addr, "")
		if err != nil {
			return out, fmt.Errorf("%w: start Redis master %d of %d for Redlock: %v; install Redis (apt-get install redis-server)", ErrNoRedis, i+1, n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// RedisArgs is the command line of a redis-server without persistence,
// listening on addr (HOST:PORT).
func RedisArgs(addr string) []string {
	host, port, _ := strings.Cut(addr, ":")
	return []string{"--port", port, "--bind", host, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", ""}
}

// ParseRedis accepts host:port or a redis:// URL.
func ParseRedis(s string) (*redis.Options, error) {
	if strings.Contains(s, "://") {
		return redis.ParseURL(s)
	}
	if !strings.Contains(s, ":") {
		return nil, fmt.Errorf("redis address %q: want host:port or redis://host:port", s)
	}
	return &redis.Options{Addr: s}, nil
}

// PingRedis sends PING to the Redis server of opts, within 3 seconds.
func PingRedis(ctx context.Context, opts *redis.Options) error {
	o := *opts
	o.MaxRetries = -1
	o.DialTimeout = 2 * time.Second
	c := redis.NewClient(&o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}
