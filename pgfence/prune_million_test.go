package pgfence_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
)

type timed struct {
	at   time.Time
	d    time.Duration
	bulk bool // on a resource whose mark the prune deletes
}

// BenchmarkPruneMillion measures, once, a prune of one million marks to zero while
// fences run beside it: four goroutines fence with fresh tokens (above the
// floor), half on new resources and half on resources whose mark is being
// pruned, and one fences stale tokens (at or below the floor) on pruned
// resources, all of which must be refused. It reports the prune's time, each
// fence's duration during the prune (max, p99) and the marks' size before,
// after the prune and after VACUUM (about 20 seconds). Being a benchmark,
// it runs only when asked:
//
//	go test -run '^$' -bench '^BenchmarkPruneMillion$' -benchtime 1x -v ./pgfence/
//
// FENCEGATE_PRUNE_BATCH sets the batch size (default
// pgfence.DefaultPruneBatch).
func BenchmarkPruneMillion(b *testing.B) {
	t := b
	const n = 1_000_000
	ctx := context.Background()
	db := pgfencetest.New(t)
	admin := db.Admin(t)
	start := time.Now()
	mustExec(t, admin, fmt.Sprintf(`SET ROLE %s; INSERT INTO fencegate.marks (resource, token, updated_at)
		SELECT 'bulk:' || g, g, now() - interval '30 days' FROM generate_series(1, %d) g; RESET ROLE; ANALYZE fencegate.marks`, db.Owner, n))
	t.Logf("inserted %d marks in %s", n, time.Since(start).Round(time.Millisecond))
	size := func() int64 {
		var s int64
		if err := admin.QueryRow(ctx, "SELECT pg_total_relation_size('fencegate.marks')").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := size()

	var (
		stop      atomic.Bool
		token     atomic.Int64
		mu        sync.Mutex
		durations []timed
		pruneFrom atomic.Int64 // unix nanoseconds: the prune's start
		pruneTo   atomic.Int64 // and end
		fresh     atomic.Int64
		staleOK   atomic.Int64
		staleNo   atomic.Int64
		staleLate atomic.Int64 // accepted although the fence began after the first batch (the floor was up)
		raisedAt  atomic.Int64 // unix nanoseconds of the first batch's end
		wg        sync.WaitGroup
	)
	token.Store(2 * n)
	for g := 0; g < 4; g++ {
		conn := db.AppConn(t)
		rng := rand.New(rand.NewSource(int64(g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []timed
			for i := 0; !stop.Load(); i++ {
				r := fmt.Sprintf("fresh:%d:%d", g, i)
				if i%2 == 1 {
					r = fmt.Sprintf("bulk:%d", 1+rng.Intn(n))
				}
				t0 := time.Now()
				_, err := conn.Exec(ctx, fencegate.FenceSQL, r, token.Add(1))
				mine = append(mine, timed{at: t0, d: time.Since(t0), bulk: i%2 == 1})
				if err != nil {
					t.Errorf("fresh fence %s: %v", r, err)
					return
				}
				fresh.Add(1)
			}
			mu.Lock()
			durations = append(durations, mine...)
			mu.Unlock()
		}()
	}
	staleConn := db.AppConn(t)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewSource(42))
		for !stop.Load() {
			k := 1 + rng.Intn(n)
			began := time.Now().UnixNano()
			_, err := staleConn.Exec(ctx, fencegate.FenceSQL, fmt.Sprintf("bulk:%d", k), int64(k))
			switch {
			case err == nil:
				// Accepted before the prune raised the floor: a mark at its own token.
				staleOK.Add(1)
				if at := raisedAt.Load(); at != 0 && began > at {
					staleLate.Add(1)
				}
			case sqlstate(err) == fencegate.CodeStaleToken:
				staleNo.Add(1)
			default:
				t.Errorf("stale fence: %v", err)
				return
			}
		}
	}()
	time.Sleep(time.Second) // the baseline: fences without a prune
	okBefore := staleOK.Load()
	pruneFrom.Store(time.Now().UnixNano())
	var batches int
	batch := 0
	if b := os.Getenv("FENCEGATE_PRUNE_BATCH"); b != "" {
		fmt.Sscan(b, &batch)
	}
	res, err := pgfence.Prune(ctx, admin, n, pgfence.PruneOptions{Batch: batch, Progress: func(int64) {
		if batches == 0 {
			raisedAt.Store(time.Now().UnixNano())
		}
		batches++
	}})
	okDuring := staleOK.Load() - okBefore
	pruneTo.Store(time.Now().UnixNano())
	time.Sleep(time.Second) // after the prune
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	afterPrune := size()
	vstart := time.Now()
	mustExec(t, admin, "VACUUM fencegate.marks")
	vacuumed := size()
	var during, duringBulk, duringNew, besides []time.Duration
	for _, d := range durations {
		if n := d.at.UnixNano(); n >= pruneFrom.Load() && n <= pruneTo.Load() {
			during = append(during, d.d)
			if d.bulk {
				duringBulk = append(duringBulk, d.d)
			} else {
				duringNew = append(duringNew, d.d)
			}
		} else {
			besides = append(besides, d.d)
		}
	}
	pct := func(ds []time.Duration) string {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		p := func(q float64) time.Duration { return ds[int(q*float64(len(ds)-1))].Round(10 * time.Microsecond) }
		slow := 0
		for _, d := range ds {
			if d > 20*time.Millisecond {
				slow++
			}
		}
		return fmt.Sprintf("%d fences, p50 %s, p99 %s, max %s, %d over 20ms", len(ds), p(0.5), p(0.99), p(1), slow)
	}
	var left int64
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM fencegate.marks WHERE token <= $1", int64(n)).Scan(&left); err != nil {
		t.Fatal(err)
	}
	t.Logf("prune: %+v (%d batches, %.0f marks/s)", res, batches, float64(res.Deleted)/res.Took.Seconds())
	t.Logf("fresh fences, all accepted (%d): during the prune %s; in the second before and after it %s", fresh.Load(), pct(during), pct(besides))
	t.Logf("during the prune, on resources being pruned: %s; on new resources: %s", pct(duringBulk), pct(duringNew))
	t.Logf("stale fences: %d refused, %d accepted before the floor rose (%d of them during the prune's first batch), %d accepted after", staleNo.Load(), staleOK.Load(), okDuring, staleLate.Load())
	if staleLate.Load() != 0 {
		t.Fatalf("%d stale fences that began after the floor rose were accepted", staleLate.Load())
	}
	t.Logf("size of fencegate.marks: %d MiB before, %d MiB after the prune, %d MiB after VACUUM (%s); %d marks at or below the floor left",
		before>>20, afterPrune>>20, vacuumed>>20, time.Since(vstart).Round(time.Millisecond), left)
	var bulk int64
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM fencegate.marks WHERE resource LIKE 'bulk:%'").Scan(&bulk); err != nil {
		t.Fatal(err)
	}
	if left != 0 || res.Deleted+bulk < n {
		t.Fatalf("prune: %+v; %d marks at or below the floor left, %d bulk marks kept (fenced above the floor)", res, left, bulk)
	}
	mustExec(t, admin, "VACUUM FULL fencegate.marks")
	var kept int64
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM fencegate.marks").Scan(&kept); err != nil {
		t.Fatal(err)
	}
	t.Logf("after VACUUM FULL (which locks the marks out; not for a live database): %d KiB for the %d marks kept", size()>>10, kept)
	// After the prune, every stale token is refused.
	for k := 1; k <= 1000; k++ {
		if _, err := staleConn.Exec(ctx, fencegate.FenceSQL, fmt.Sprintf("bulk:%d", k*997%n+1), int64(k*997%n+1)); sqlstate(err) != fencegate.CodeStaleToken {
			t.Fatalf("stale fence after the prune: %v", err)
		}
	}
}
