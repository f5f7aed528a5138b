package raftstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// counterAlloc is an AllocFunc over an in-memory counter that records the
// size of each call; gate, when set, holds every call until closed.
type counterAlloc struct {
	mu    sync.Mutex
	next  int64
	calls []int
	gate  chan struct{}
}

func (c *counterAlloc) alloc(ctx context.Context, n int) (Range, error) {
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
	got := make([]Range, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.Next(context.Background(), 1)
			if err != nil {
				t.Error(err)
			}
			got[i] = r
		}()
	}
	// Let everyone queue behind the held first allocation, then release.
	testutil.Eventually(t, 5*time.Second, "all calls queued", func() bool { return b.received.Load() == n })
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
