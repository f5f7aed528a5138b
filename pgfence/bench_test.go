package pgfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/fencebench"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// The benchmarks run each workload on a protected table and on its
// unprotected twin (same columns, same stored resource column, no checks).
// Besides ns/op they report backend-µs/op: the CPU time the serving
// PostgreSQL backend spent per operation, which moves far less than time on
// a shared machine. For the two side by side with medians over several
// runs: cd bench && go run ./fencebench.

func benchConn(b *testing.B) *pgx.Conn {
	b.Helper()
	db := pgfencetest.New(b)
	conn := db.Admin(b)
	if err := fencebench.Setup(context.Background(), conn, 1000); err != nil {
		b.Fatal(err)
	}
	return conn
}

func reportBackendCPU(b *testing.B, conn *pgx.Conn, before time.Duration) {
	b.Helper()
	after, err := fencebench.BackendCPU(context.Background(), conn)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(after-before)/float64(time.Microsecond)/float64(b.N), "backend-µs/op")
}

func BenchmarkFencedWrite(b *testing.B) {
	ctx := context.Background()
	conn := benchConn(b)
	for _, table := range []string{fencebench.Unprotected, fencebench.Protected} {
		b.Run(table, func(b *testing.B) {
			cpu, err := fencebench.BackendCPU(ctx, conn)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := fencebench.FencedWrite(ctx, conn, table, int64(i%1000+1), 1); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportBackendCPU(b, conn, cpu)
		})
	}
}

// benchBulk times one bulk operation per iteration, emptying the tables
// outside the timer.
func benchBulk(b *testing.B, op func(ctx context.Context, conn *pgx.Conn, table string) error) {
	ctx := context.Background()
	conn := benchConn(b)
	for _, table := range []string{fencebench.Unprotected, fencebench.Protected} {
		b.Run(table, func(b *testing.B) {
			b.StopTimer()
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				if err := fencebench.Empty(ctx, conn, 1000); err != nil {
					b.Fatal(err)
				}
				c0, err := fencebench.BackendCPU(ctx, conn)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := op(ctx, conn, table); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				c1, err := fencebench.BackendCPU(ctx, conn)
				if err != nil {
					b.Fatal(err)
				}
				cpu += c1 - c0
			}
			b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "backend-µs/op")
		})
	}
}

func BenchmarkInsertSelect100k(b *testing.B) {
	benchBulk(b, func(ctx context.Context, conn *pgx.Conn, table string) error {
		return fencebench.BulkInsert(ctx, conn, table, 1001, 100000, 1)
	})
}

func BenchmarkCopy100k(b *testing.B) {
	benchBulk(b, func(ctx context.Context, conn *pgx.Conn, table string) error {
		return fencebench.BulkCopy(ctx, conn, table, fencebench.CopyData(1001, 100000, 1), 1)
	})
}

func BenchmarkInsert1000Resources100k(b *testing.B) {
	benchBulk(b, func(ctx context.Context, conn *pgx.Conn, table string) error {
		return fencebench.BulkInsert(ctx, conn, table, 1001, 100000, 1000)
	})
}
