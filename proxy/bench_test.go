package proxy_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
)

// benchTargets returns the application role's DSN straight to a fresh
// database (schema installed, table t protected with one resource) and
// through a proxy in front of it.
func benchTargets(b *testing.B) map[string]string {
	db := pgfencetest.New(b)
	c := connect(b, db.DSN)
	if _, err := c.Exec(context.Background(), "CREATE TABLE t (id int PRIMARY KEY, n bigint); INSERT INTO t VALUES (1, 0); GRANT SELECT, UPDATE ON t TO "+db.App); err != nil {
		b.Fatal(err)
	}
	protect(b, db.DSN, "t", "'bench'")
	return map[string]string{"direct": db.AppDSN, "proxy": proxytest.Start(b, db.AppDSN),
		"proxy-check-every-session": proxytest.Start(b, db.AppDSN, everySession)}
}

// BenchmarkSelect measures a read-only autocommit query, direct and through
// the proxy: the proxy adds no round trip and forwards the frames as they
// are.
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

// BenchmarkFencedWrite measures BEGIN; fence; UPDATE; COMMIT on a protected
// table, direct and through the proxy: the same messages both ways.
func BenchmarkFencedWrite(b *testing.B) {
	targets := benchTargets(b)
	for _, name := range []string{"direct", "proxy"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			c := connect(b, targets[name])
			for b.Loop() {
				if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, fencegate.FenceSQL, "bench", 1); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "UPDATE t SET n = n + 1 WHERE id = 1")
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkConnect measures opening and closing a session, direct and
// through the proxy, whose gate adds one round trip of catalog queries to a
// session: with the default CheckInterval once a second per database and
// role, or at every session.
func BenchmarkConnect(b *testing.B) {
	targets := benchTargets(b)
	for _, name := range []string{"direct", "proxy", "proxy-check-every-session"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				c, err := pgx.Connect(ctx, targets[name])
				if err != nil {
					b.Fatal(err)
				}
				c.Close(ctx)
			}
		})
	}
}
