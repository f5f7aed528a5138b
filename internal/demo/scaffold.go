package demo

// TEMPORARY scaffolding until lockclient, tokenservice and proxy are merged.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/tokenservice"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

type demoLocker interface {
	Acquire(ctx context.Context, resource string) (demoLock, error)
	Close() error
}

type demoLock interface {
	Token() int64
	Held() bool
	Release(ctx context.Context) error
	FencedTx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error
}

type scaffoldLocker struct {
	rdb *redis.Client
	tc  *tokenservice.Client
	ttl time.Duration
}

func newLocker(c *ClientConfig) (demoLocker, error) {
	tc, err := tokenservice.NewClient(c.Tokens)
	if err != nil {
		return nil, err
	}
	return &scaffoldLocker{rdb: redis.NewClient(&redis.Options{Addr: c.Redis[0]}), tc: tc, ttl: c.TTL}, nil
}

func (l *scaffoldLocker) Close() error { l.tc.Close(); return l.rdb.Close() }

func (l *scaffoldLocker) Acquire(ctx context.Context, resource string) (demoLock, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	val := hex.EncodeToString(b)
	for {
		ok, err := l.rdb.SetNX(ctx, "lock:"+resource, val, l.ttl).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			tok, err := l.tc.NextToken(ctx, resource)
			if err != nil {
				return nil, err
			}
			return &scaffoldLock{l: l, key: "lock:" + resource, val: val, res: resource, tok: tok, until: time.Now().Add(l.ttl)}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type scaffoldLock struct {
	l     *scaffoldLocker
	key   string
	val   string
	res   string
	tok   int64
	until time.Time
}

func (s *scaffoldLock) Token() int64 { return s.tok }
func (s *scaffoldLock) Held() bool   { return time.Now().Before(s.until) }
func (s *scaffoldLock) Release(ctx context.Context) error {
	return s.l.rdb.Eval(ctx, `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`, []string{s.key}, s.val).Err()
}
func (s *scaffoldLock) FencedTx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT fencegate.fence($1::text, $2::bigint)", s.res, s.tok); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		return fn(tx)
	})
}

// installFenceStandIn creates a SQL stand-in for the proxy's fence.
func installFenceStandIn(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `
CREATE SCHEMA IF NOT EXISTS fencegate;
CREATE TABLE IF NOT EXISTS fencegate.marks(resource text PRIMARY KEY, token bigint NOT NULL);
CREATE OR REPLACE FUNCTION fencegate.fence(r text, t bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE cur bigint;
BEGIN
  INSERT INTO fencegate.marks VALUES (r, t) ON CONFLICT (resource) DO NOTHING;
  SELECT token INTO cur FROM fencegate.marks WHERE resource = r FOR UPDATE;
  IF t < cur THEN RAISE EXCEPTION 'stale token % for %, current %', t, r, cur USING ERRCODE = 'FG001'; END IF;
  UPDATE fencegate.marks SET token = t WHERE resource = r;
  RETURN t;
END $$;`)
	return err
}

func (s *stack) startProxy(ctx context.Context) error {
	s.proxyAddr = ""
	return nil
}

func (s *stack) prepareFenced(ctx context.Context, fenced bool) error {
	if !fenced {
		return nil
	}
	conn, err := pgx.Connect(ctx, s.directDSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return installFenceStandIn(ctx, conn)
}
