package lockclient

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/redis/go-redis/v9"
)

// testRedis is a set of Redis masters for one test and plain clients to
// inspect them.
type testRedis struct {
	servers []*testutil.RedisServer // nil for the shared Redis
	clients []redis.UniversalClient
	prefix  string
	addr    string // the shared Redis's address (sharedRedis only)
}

// sharedRedis uses the shared Redis with this test's key prefix.
func sharedRedis(t *testing.T) *testRedis {
	t.Helper()
	addr, prefix := testutil.Redis(t)
	return &testRedis{clients: []redis.UniversalClient{newRedisClient(t, addr)}, prefix: prefix + "lock:", addr: addr}
}

// startMasters starts n redis-server processes.
func startMasters(t *testing.T, n int) *testRedis {
	t.Helper()
	tr := &testRedis{prefix: "lock:"}
	for range n {
		s := testutil.StartRedis(t)
		tr.servers = append(tr.servers, s)
		tr.clients = append(tr.clients, newRedisClient(t, s.Addr()))
	}
	return tr
}

func newRedisClient(t *testing.T, addr string) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, DialerRetries: 1, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// client builds a lockclient over the masters; the test's options come last.
func (tr *testRedis) client(t *testing.T, tokens TokenSource, opts ...Option) *Client {
	t.Helper()
	base := []Option{WithKeyPrefix(tr.prefix), WithLogger(testutil.Logger(t)),
		WithNodeTimeout(2 * time.Second), WithRetry(FixedRetry(5 * time.Millisecond))}
	c, err := New(tr.clients, tokens, append(base, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// values returns the value of the lock key of resource on every master
// ("" where absent, "ERR" where the master does not answer).
func (tr *testRedis) values(t *testing.T, resource string) []string {
	t.Helper()
	out := make([]string, len(tr.clients))
	for i, c := range tr.clients {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := c.Get(ctx, tr.prefix+resource).Result()
		cancel()
		switch {
		case err == redis.Nil:
		case err != nil:
			out[i] = "ERR"
		default:
			out[i] = v
		}
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, c *Client, resource string) *Lock {
	t.Helper()
	l, err := c.Acquire(ctxT(t), resource)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", resource, err)
	}
	return l
}

func waitDone(t *testing.T, l *Lock, what string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, func() bool {
		select {
		case <-l.Done():
			return true
		default:
			return false
		}
	})
}
