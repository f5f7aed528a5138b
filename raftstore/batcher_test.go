package raftstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// counterAlloc is an AllocFunc over an in-memory counter that records the
// size of each call; gate, when set, holds every call until closed.
type counterAlloc struct {
	mu      sync.Mutex
	next    int64
	calls   []int
	gate    chan struct{}
	entered atomic.Int64 // calls begun, held at the gate or not
}

func (c *counterAlloc) alloc(ctx context.Context, n int) (Range, error) {
	c.entered.Add(1)
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return Range{}, ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, n)
	first := c.next + 1
	c.next += int64(n)
	return Range{First: first, Count: n, Index: uint64(len(c.calls))}, nil
}

func TestBatcherMergesConcurrentCalls(t *testing.T) {
	ca := &counterAlloc{gate: make(chan struct{})}
	b := NewBatcher(ca.alloc, WithMaxInflight(1))
	defer b.Close()
	const n = 100
	var wg sync.WaitGroup
	var calling atomic.Int64
	got := make([]Range, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			calling.Add(1)
			r, err := b.Next(context.Background(), 1)
			if err != nil {
				t.Error(err)
			}
			got[i] = r
		}()
	}
	// Let everyone queue behind the held first allocation, then release.
	testutil.Eventually(t, 5*time.Second, "every caller calling, one allocation held", func() bool {
		return calling.Load() == n && ca.entered.Load() == 1
	})
	close(ca.gate)
	wg.Wait()
	seen := map[int64]bool{}
	for _, r := range got {
		if r.First <= 0 || seen[r.First] {
			t.Fatalf("token %d duplicated or not positive", r.First)
		}
		seen[r.First] = true
	}
	if len(ca.calls) >= n {
		t.Fatalf("%d allocations for %d calls; want them merged", len(ca.calls), n)
	}
	t.Logf("%d calls served by %d allocations %v", n, len(ca.calls), ca.calls)
}

// The batch limit holds while callers queue behind an allocation in flight:
// no allocation is larger than the limit (unless one caller alone asks for
// more), and every caller is served. Before, callers that arrived during a
// slow commit were all merged, and one follower forwarded 300 x 4096 tokens
// in a single call that the leader refused.
func TestBatcherHonoursLimitWhileWaiting(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit       int
		sizes       []int
		wantLargest int
	}{
		{"300 full batches", 4096, repeat(4096, 300), 4096},
		{"small callers", 10, repeat(3, 200), 10},
		{"mixed, one oversize", 10, append(repeat(4, 50), 25), 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := &counterAlloc{gate: make(chan struct{})}
			b := NewBatcher(ca.alloc, WithMaxInflight(1), WithMaxBatch(tc.limit))
			defer b.Close()
			var wg sync.WaitGroup
			got := make([]Range, len(tc.sizes))
			for i, n := range tc.sizes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := b.Next(context.Background(), n)
					if err != nil {
						t.Error(err)
					}
					got[i] = r
				}()
			}
			// Everyone queues behind the first allocation, held at the gate.
			testutil.Eventually(t, 10*time.Second, "the first allocation to be in flight", func() bool { return ca.entered.Load() >= 1 })
			time.Sleep(50 * time.Millisecond) // let the rest queue up
			close(ca.gate)
			wg.Wait()
			largest, sum := 0, 0
			for _, n := range ca.calls {
				largest = max(largest, n)
				sum += n
			}
			if largest > tc.wantLargest {
				t.Fatalf("largest allocation %d tokens, limit %d (calls %v)", largest, tc.limit, ca.calls)
			}
			want := 0
			for i, n := range tc.sizes {
				want += n
				if got[i].Count != n || got[i].First <= 0 {
					t.Fatalf("caller %d asked for %d tokens, got %+v", i, n, got[i])
				}
			}
			if sum != want {
				t.Fatalf("allocated %d tokens for callers asking %d", sum, want)
			}
			t.Logf("%d callers, %d allocations, largest %d", len(tc.sizes), len(ca.calls), largest)
		})
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}

func TestBatcherErrorsAndClose(t *testing.T) {
	boom := errors.New("boom")
	b := NewBatcher(func(ctx context.Context, n int) (Range, error) { return Range{}, boom })
	if _, err := b.Next(context.Background(), 1); !errors.Is(err, boom) {
		t.Fatalf("Next = %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Next(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with cancelled ctx = %v, want context.Canceled", err)
	}
	b.Close()
	b.Close()
	if _, err := b.Next(context.Background(), 1); !errors.Is(err, ErrBatcherClosed) {
		t.Fatalf("Next after Close = %v, want ErrBatcherClosed", err)
	}
}

// Close returns once every goroutine the batcher started is gone: an
// allocation held in flight is cancelled and has returned, and every caller,
// served or queued, has its answer.
func TestBatcherCloseWaitsForItsGoroutines(t *testing.T) {
	var running atomic.Int64
	held := make(chan struct{})
	b := NewBatcher(func(ctx context.Context, n int) (Range, error) {
		running.Add(1)
		defer running.Add(-1)
		select {
		case held <- struct{}{}:
		case <-ctx.Done():
		}
		<-ctx.Done()
		return Range{}, ctx.Err()
	})
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := b.Next(context.Background(), 1)
			errs <- err
		}()
	}
	<-held // one allocation in flight, the other callers queued behind it
	b.Close()
	if got := running.Load(); got != 0 {
		t.Fatalf("Close returned with %d allocations still running", got)
	}
	for range n {
		if err := <-errs; !errors.Is(err, context.Canceled) && !errors.Is(err, ErrBatcherClosed) {
			t.Fatalf("Next during Close = %v; want the cancelled allocation's error or ErrBatcherClosed", err)
		}
	}
}

func BenchmarkBatcher(b *testing.B) {
	ca := &counterAlloc{}
	bt := NewBatcher(ca.alloc)
	defer bt.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := bt.Next(context.Background(), 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
