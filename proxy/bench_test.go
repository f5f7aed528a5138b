package proxy_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/proxytest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy"
	"github.com/jackc/pgx/v5"
)

// benchTargets returns the direct DSN and the DSN through a proxy in front
// of a fresh database.
func benchTargets(b *testing.B) map[string]string {
	direct := testutil.PostgresDB(b)
	c, err := pgx.Connect(context.Background(), direct)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := proxy.EnsureSchema(context.Background(), c); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Exec(context.Background(), "CREATE TABLE t (id int PRIMARY KEY, n bigint); INSERT INTO t VALUES (1, 0)"); err != nil {
		b.Fatal(err)
	}
	return map[string]string{"direct": direct, "proxy": proxytest.Start(b, direct)}
}

// BenchmarkSelect measures a read-only autocommit query, direct and through
// the proxy: the proxy adds no round trip and injects nothing for it.
func BenchmarkSelect(b *testing.B) {
	targets := benchTargets(b)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for _, name := range []string{"direct", "proxy"} {
			b.Run(mode.String()+"/"+name, func(b *testing.B) {
				ctx := context.Background()
				c := connect(b, targets[name])
				var n int64
				for b.Loop() {
					if err := c.QueryRow(ctx, "SELECT n FROM t WHERE id = $1", mode, 1).Scan(&n); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkFencedWrite measures BEGIN; fence; UPDATE; COMMIT through the
// proxy against the same transaction sent direct with the fence's own SQL
// (proxy.FenceSQL) in place of the fence call. The proxy's read-write
// switch travels in the same write as the fence: no extra round trip.
func BenchmarkFencedWrite(b *testing.B) {
	targets := benchTargets(b)
	for _, name := range []string{"direct", "proxy"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			c := connect(b, targets[name])
			for b.Loop() {
				tx, err := c.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if name == "direct" {
					// FenceSQL with the arguments inlined, in one message.
					_, err = tx.Exec(ctx, "SET TRANSACTION READ WRITE; SELECT fencegate.fence('bench', 1)", pgx.QueryExecModeSimpleProtocol)
				} else {
					_, err = tx.Exec(ctx, "SELECT fencegate.fence($1, $2)", "bench", 1)
				}
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "UPDATE t SET n = n + 1 WHERE id = 1"); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
