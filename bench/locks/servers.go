package main

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/redis/go-redis/v9"
)

// quietLogger drops go-redis's own log lines (dial failures while a server
// starts are expected).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func waitPing(ctx context.Context, addr string) error {
	return poll.Until(ctx, "redis-server on "+addr+" to answer PING", 20*time.Millisecond, 10*time.Second,
		func(ctx context.Context) error { return servers.PingRedis(ctx, &redis.Options{Addr: addr}) })
}
