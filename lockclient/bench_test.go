package lockclient

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAcquireRelease measures one TryAcquire+Release cycle, each
// goroutine on its own resource, on the shared Redis (single) and on five
// redis-server masters (redlock5), without a token and with tokens from an
// in-process 3-node token cluster (the full cycle). See bench/locks (its
// own module) for the side-by-side comparison with bsm/redislock and redsync.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, mode := range []string{"single", "redlock5", "single+token", "redlock5+token"} {
		b.Run(mode, func(b *testing.B) {
			var clients []redis.UniversalClient
			var tokens TokenSource
			if strings.HasSuffix(mode, "+token") {
				tokens = tokenservicetest.StartCluster(b, 3, tokenservicetest.WithLogger(slog.New(slog.DiscardHandler))).Client(b)
			}
			prefix := "lock:"
			if strings.HasPrefix(mode, "single") {
				addr, p := testutil.Redis(b)
				prefix = p + prefix
				clients = append(clients, benchRedisClient(b, addr))
			} else {
				for range 5 {
					clients = append(clients, benchRedisClient(b, testutil.StartRedis(b).Addr()))
				}
			}
			c, err := New(clients, tokens, WithKeyPrefix(prefix), WithRetry(NoRetry()), WithNodeTimeout(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				res := fmt.Sprintf("bench%d", worker.Add(1))
				for pb.Next() {
					l, err := c.TryAcquire(ctx, res)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func benchRedisClient(b *testing.B, addr string) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128, MaxRetries: -1,
		ContextTimeoutEnabled: true, DisableIdentity: true})
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkInTx measures one fenced transaction (BEGIN, the fence, one
// INSERT into a protected table, COMMIT) through an in-process fencegate
// proxy, as an application role, under the lease's context as the README
// shows, on one connection.
func BenchmarkInTx(b *testing.B) {
	d := pgfencetest.New(b)
	ctx := context.Background()
	d.Exec(b, "CREATE TABLE ledger (holder text NOT NULL, token bigint NOT NULL)")
	if err := pgfence.Protect(ctx, d.Admin(b), "ledger", "'ledger'"); err != nil {
		b.Fatal(err)
	}
	d.Exec(b, "GRANT SELECT, INSERT, UPDATE, DELETE ON ledger TO "+d.App)
	db, err := pgx.Connect(ctx, proxytest.Start(b, d.AppDSN))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	addr, prefix := testutil.Redis(b)
	c, err := New([]redis.UniversalClient{benchRedisClient(b, addr)}, &benchTokens{},
		WithKeyPrefix(prefix), WithTTL(time.Minute), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	l, err := c.Acquire(ctx, "ledger")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		err := l.InTx(l.Context(), db, func(tx pgx.Tx) error {
			_, err := tx.Exec(l.Context(), "INSERT INTO ledger (holder, token) VALUES ('b', $1)", l.Token())
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchTokens is a counter standing in for the token service.
type benchTokens struct{ n atomic.Int64 }

func (s *benchTokens) NextToken(context.Context, string) (int64, error) { return s.n.Add(1), nil }
