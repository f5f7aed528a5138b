package faults

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/proc"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/redis/go-redis/v9"
)

// TestClockJumpExpiresRedisKeys shows that a redis-server under the clock
// shim expires a key early when its clock jumps forward past the key's TTL:
// Redis computes expiry from its own wall clock.
func TestClockJumpExpiresRedisKeys(t *testing.T) {
	dir := t.TempDir()
	shim, err := BuildClockShim(dir)
	if err != nil {
		t.Fatal(err)
	}
	clock, err := NewClock(shim, dir+"/clock")
	if err != nil {
		t.Fatal(err)
	}
	sup, err := proc.New(dir, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	addr := testutil.FreeAddr(t)
	p := sup.Add("redis", "redis-server", servers.RedisArgs(addr), proc.WithEnv(clock.Env()...))
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	testutil.WaitFor(t, 10*time.Second, "redis under the clock shim", func() error {
		return c.Ping(ctx).Err()
	})
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 1 {
		t.Fatalf("Exists(k) before the jump = %d, %v; want 1", n, err)
	}
	if err := clock.Set(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("Exists(k) after a 2m jump of a 1m key = %d, %v; want 0", n, err)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if skew := now.Sub(time.Now()); skew < 110*time.Second {
		t.Fatalf("redis TIME is %v ahead, want about 2m", skew)
	}
}
