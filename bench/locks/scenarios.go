package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// cycleFunc takes and releases the lock on resource once.
type cycleFunc func(ctx context.Context, resource string) error

// scenario is one lock implementation under test.
type scenario struct {
	name  string
	peer  string // the scenario this one is compared with ("" for none)
	cycle cycleFunc
}

const benchTTL = 10 * time.Second

// newClients opens one go-redis client per address, with pools sized for
// the highest concurrency measured. Every implementation gets the same.
func newClients(addrs []string, conc int) []redis.UniversalClient {
	var out []redis.UniversalClient
	for _, a := range addrs {
		out = append(out, redis.NewClient(&redis.Options{
			Addr: a, PoolSize: max(conc*2, 32), MinIdleConns: conc,
			DisableIdentity: true, MaxRetries: -1, ContextTimeoutEnabled: true,
		}))
	}
	return out
}

func bsmScenario(rdb redis.UniversalClient) scenario {
	c := redislock.New(rdb)
	return scenario{name: "bsm/redislock (1 node)", cycle: func(ctx context.Context, r string) error {
		l, err := c.Obtain(ctx, "bench:bsm:"+r, benchTTL, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
}

func redsyncScenario(rdbs []redis.UniversalClient) scenario {
	var pools []rsredis.Pool
	for _, r := range rdbs {
		pools = append(pools, goredis.NewPool(r))
	}
	rs := redsync.New(pools...)
	return scenario{name: fmt.Sprintf("redsync (%d masters)", len(rdbs)), cycle: func(ctx context.Context, r string) error {
		m := rs.NewMutex("bench:redsync:"+r, redsync.WithExpiry(benchTTL), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock refused")
		}
		return err
	}}
}

func lockclientScenario(name, peer string, rdbs []redis.UniversalClient, tokens lockclient.TokenSource) (scenario, error) {
	c, err := lockclient.New(rdbs, tokens, lockclient.WithTTL(benchTTL), lockclient.WithRetry(lockclient.NoRetry()),
		lockclient.WithKeyPrefix("bench:lockclient:"), lockclient.WithNodeTimeout(time.Second))
	if err != nil {
		return scenario{}, err
	}
	return scenario{name: name, peer: peer, cycle: func(ctx context.Context, r string) error {
		l, err := c.TryAcquire(ctx, r)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}, nil
}
