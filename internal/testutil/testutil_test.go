package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func TestPostgresDB(t *testing.T) {
	dsn := PostgresDB(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer c.Close(ctx)
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

func TestStartRedisRestartLosesKeys(t *testing.T) {
	s := StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	s.Start()
	if got, err := c.Exists(ctx, "k").Result(); err != nil || got != 0 {
		t.Fatalf("Exists(k) after restart = %d, %v; want 0", got, err)
	}
}

func TestSharedRedis(t *testing.T) {
	addr, prefix := Redis(t)
	if addr == "" || prefix == "" {
		t.Fatal("empty addr or prefix")
	}
}
