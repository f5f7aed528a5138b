package raftstore_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencegate/fencegate/raftstore"
)

// A Batcher in front of an allocation function: every caller gets its own
// token; callers that arrive together share one allocation. In a node the
// function is (*Store).Allocate, one Raft log entry per call.
func ExampleBatcher() {
	var (
		mu   sync.Mutex
		last int64
	)
	alloc := func(ctx context.Context, n int) (raftstore.Range, error) {
		mu.Lock()
		defer mu.Unlock()
		first := last + 1
		last += int64(n)
		return raftstore.Range{First: first, Count: n}, nil
	}
	b := raftstore.NewBatcher(alloc)
	defer b.Close()

	var wg sync.WaitGroup
	tokens := make([]int64, 8)
	for i := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.Next(context.Background(), 1)
			if err != nil {
				panic(err)
			}
			tokens[i] = r.First
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, t := range tokens {
		seen[t] = true
	}
	fmt.Println(len(seen), "distinct tokens, highest", last)
	// Output: 8 distinct tokens, highest 8
}
