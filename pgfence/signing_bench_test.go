package pgfence_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/fencebench"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// BenchmarkFenceProof compares, side by side on one server, a fence with a
// proof on a database that requires signed tokens and a fence without one
// on a database that does not, both straight to PostgreSQL as the
// application role. Each operation is one pipelined round trip: BEGIN, the
// fence on a resource whose mark exists, and then COMMIT (the mark is
// written and flushed) or ROLLBACK (nothing is flushed: the fence's own
// CPU shows in full). The two alternate in rounds of 100 operations; the
// benchmark reports the median over rounds of each one's time per
// operation, the backend CPU per operation over the whole run (the kernel
// counts it in 10 ms ticks, too coarse for one round), and signed/unsigned
// ratios of throughput (goal: at least 0.9) and of backend CPU.
func BenchmarkFenceProof(b *testing.B) {
	for _, end := range []string{"COMMIT", "ROLLBACK"} {
		b.Run(end, func(b *testing.B) { benchFenceProof(b, end) })
	}
}

func benchFenceProof(b *testing.B, end string) {
	ctx := context.Background()
	const cluster = "6c0d4f0e2a9b41c7"
	keys := keyring(b, keyNew, keyOld)
	type side struct {
		name  string
		conn  *pgx.Conn
		batch func(tok int64) *pgx.Batch
		wall  []float64
		cpu   time.Duration // backend CPU over all rounds (/proc counts in 10 ms ticks)
	}
	mk := func(signed bool) *side {
		db := pgfencetest.New(b)
		if signed {
			requireSigned(b, db, cluster, keys)
		}
		conn := db.AppConn(b)
		s := &side{name: "unsigned", conn: conn}
		s.batch = func(tok int64) *pgx.Batch {
			bt := &pgx.Batch{}
			bt.Queue("BEGIN")
			bt.Queue(fencegate.FenceSQL, "orders/42", tok)
			bt.Queue(end)
			return bt
		}
		if signed {
			s.name = "signed"
			s.batch = func(tok int64) *pgx.Batch {
				bt := &pgx.Batch{}
				bt.Queue("BEGIN")
				bt.Queue(fencegate.FenceSignedSQL, "orders/42", tok, keys.Sign(cluster, "orders/42", tok))
				bt.Queue(end)
				return bt
			}
		}
		// The mark exists: the fence updates it, as it does for every
		// lock holder but the first.
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			b.Fatal(err)
		}
		if signed {
			_, err := conn.Exec(ctx, fencegate.FenceSignedSQL, "orders/42", int64(1), keys.Sign(cluster, "orders/42", 1))
			if err != nil {
				b.Fatal(err)
			}
		} else if _, err := conn.Exec(ctx, fencegate.FenceSQL, "orders/42", int64(1)); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			b.Fatal(err)
		}
		return s
	}
	sides := []*side{mk(false), mk(true)}
	const round = 100
	tok := int64(1)
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(round, b.N-done)
		for _, s := range sides {
			batches := make([]*pgx.Batch, n)
			for i := range batches {
				t := tok
				if end == "COMMIT" {
					t = tok + int64(i)
				}
				batches[i] = s.batch(t)
			}
			cpu0, err := fencebench.BackendCPU(ctx, s.conn)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for _, bt := range batches {
				if err := s.conn.SendBatch(ctx, bt).Close(); err != nil {
					b.Fatalf("%s fence: %v", s.name, err)
				}
			}
			wall := time.Since(start)
			cpu1, err := fencebench.BackendCPU(ctx, s.conn)
			if err != nil {
				b.Fatal(err)
			}
			s.wall = append(s.wall, float64(wall.Microseconds())/float64(n))
			s.cpu += cpu1 - cpu0
		}
		if end == "COMMIT" {
			tok += int64(n)
		}
		done += n
	}
	b.StopTimer()
	med := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	cpu := func(s *side) float64 { return float64(s.cpu.Microseconds()) / float64(b.N) }
	for _, s := range sides {
		b.ReportMetric(med(s.wall), s.name+"-µs/op")
		b.ReportMetric(cpu(s), s.name+"-backend-µs/op")
	}
	b.ReportMetric(med(sides[0].wall)/med(sides[1].wall), "throughput-signed/unsigned")
	if c := cpu(sides[0]); c > 0 {
		b.ReportMetric(cpu(sides[1])/c, "backend-cpu-signed/unsigned")
	}
	b.ReportMetric(0, "ns/op")
	if testing.Verbose() {
		fmt.Printf("fence %s: unsigned %.1f µs/op (backend %.1f), signed %.1f µs/op (backend %.1f), %d rounds\n",
			end, med(sides[0].wall), cpu(sides[0]), med(sides[1].wall), cpu(sides[1]), len(sides[0].wall))
	}
}
