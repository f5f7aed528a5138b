package main

// TEMPORARY: stands in for lockclient until it is merged.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/fencegate/fencegate/tokenservice"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

type scaffoldLocks struct {
	rdb *redis.Client
	tc  *tokenservice.Client
	ttl time.Duration
}

func newLocks(cfg workerConfig) (*scaffoldLocks, error) {
	tc, err := tokenservice.NewClient(cfg.Tokens)
	if err != nil {
		return nil, err
	}
	return &scaffoldLocks{rdb: redis.NewClient(&redis.Options{Addr: cfg.Redis[0]}), tc: tc, ttl: cfg.TTL}, nil
}

func (l *scaffoldLocks) Close() error { l.tc.Close(); return l.rdb.Close() }

func (l *scaffoldLocks) Acquire(ctx context.Context, resource string) (*scaffoldLock, error) {
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
			return &scaffoldLock{l: l, key: "lock:" + resource, val: val, res: resource, tok: tok}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

type scaffoldLock struct {
	l   *scaffoldLocks
	key string
	val string
	res string
	tok int64
}

func (s *scaffoldLock) Token() int64 { return s.tok }
func (s *scaffoldLock) Release(ctx context.Context) error {
	return s.l.rdb.Eval(ctx, `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`, []string{s.key}, s.val).Err()
}
func (s *scaffoldLock) InTx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT fencegate.fence($1::text, $2::bigint)", s.res, s.tok); err != nil {
			return err
		}
		return fn(tx)
	})
}

const fenceStandIn = `
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
END $$;`

func prepareFence(ctx context.Context, db string) error {
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, fenceStandIn)
	return err
}

func fencedDSN(db, proxy string) (string, error) { return db, nil }
