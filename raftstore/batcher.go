package raftstore

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrBatcherClosed is returned by a closed Batcher.
var ErrBatcherClosed = errors.New("raftstore: batcher closed")

// AllocFunc allocates n consecutive tokens in one step (one log entry).
// (*Store).Allocate is one.
type AllocFunc func(ctx context.Context, n int) (Range, error)

// Batcher is group commit: concurrent callers of Next that arrive while a
// previous allocation is in flight are merged into a single AllocFunc call,
// i.e. a single Raft log entry that allocates a range. Every caller gets its
// own sub-range, so tokens within a batch are distinct, and all of them are
// above every token minted before the entry.
//
// Every goroutine a Batcher starts (its loop, one per allocation in
// flight) is started through goFunc and counted in wg, as hashicorp/raft
// does; Close cancels ctx, which is the one shutdown signal, and returns
// once they are all gone.
type Batcher struct {
	alloc    AllocFunc
	maxBatch int
	timeout  time.Duration
	reqs     chan *batchReq
	sem      chan struct{} // one slot per allocation in flight
	// ctx ends at Close: it stops the loop, cancels the allocations in
	// flight, and refuses new calls.
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type batchReq struct {
	ctx context.Context
	n   int
	res chan batchRes
}

type batchRes struct {
	r   Range
	err error
}

// BatcherOption configures a Batcher.
type BatcherOption func(*Batcher)

// WithMaxBatch caps how many tokens one entry allocates: callers are merged
// only while their sum stays within it (a single caller asking for more is
// allocated alone). The default is DefaultMaxBatch (4096).
func WithMaxBatch(n int) BatcherOption { return func(b *Batcher) { b.maxBatch = max(1, n) } }

// WithMaxInflight caps how many allocations are in flight at once; callers
// arriving meanwhile wait and form the next batch. The default is
// DefaultMaxInflight (1).
func WithMaxInflight(n int) BatcherOption {
	return func(b *Batcher) { b.sem = make(chan struct{}, max(1, n)) }
}

// WithBatchTimeout bounds one allocation. The default is 10s.
func WithBatchTimeout(d time.Duration) BatcherOption { return func(b *Batcher) { b.timeout = d } }

// NewBatcher returns a Batcher that allocates through alloc. Close it when done.
func NewBatcher(alloc AllocFunc, opts ...BatcherOption) *Batcher {
	b := &Batcher{
		alloc:    alloc,
		maxBatch: DefaultMaxBatch,
		timeout:  10 * time.Second,
		reqs:     make(chan *batchReq, 1024),
		sem:      make(chan struct{}, DefaultMaxInflight),
	}
	for _, o := range opts {
		o(b)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.goFunc(b.loop)
	return b
}

// goFunc runs f in a goroutine that Close waits for.
func (b *Batcher) goFunc(f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

// Next returns n consecutive tokens (n >= 1), allocated together with those
// of other concurrent callers.
//
// Every request queued gets exactly one answer: from the allocation that
// served it, or ErrBatcherClosed from whoever drains the queue after Close
// (the loop as it stops, Close once every goroutine is gone, or Next
// itself when it queued after that).
func (b *Batcher) Next(ctx context.Context, n int) (Range, error) {
	if b.ctx.Err() != nil {
		return Range{}, ErrBatcherClosed
	}
	req := &batchReq{ctx: ctx, n: max(1, n), res: make(chan batchRes, 1)}
	select {
	case b.reqs <- req:
	case <-b.ctx.Done():
		return Range{}, ErrBatcherClosed
	case <-ctx.Done():
		return Range{}, ctx.Err()
	}
	if b.ctx.Err() != nil {
		// Closed while this request was queued: Close may have drained
		// the queue before it arrived.
		b.failPending()
	}
	select {
	case res := <-req.res:
		return res.r, res.err
	case <-ctx.Done():
		return Range{}, ctx.Err()
	}
}

// Close stops the batcher and returns once every goroutine it started has
// returned; pending and later calls fail with ErrBatcherClosed (in-flight
// allocations are cancelled and fail with their AllocFunc's error).
func (b *Batcher) Close() {
	b.closeOnce.Do(func() {
		b.cancel()
		b.wg.Wait()
		b.failPending()
	})
}

func (b *Batcher) loop() {
	// carry is a request taken from the queue that did not fit the batch
	// being formed; it opens the next one.
	var carry *batchReq
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-b.reqs:
			case <-b.ctx.Done():
				b.failPending()
				return
			}
		}
		batch, total := []*batchReq{first}, first.n
		// Wait for an in-flight slot, gathering the callers that arrive
		// meanwhile, up to the batch limit: a caller that would push the
		// batch over it waits for the next batch, and while the batch is
		// full no more callers are taken from the queue.
		reqs := b.reqs
		if total >= b.maxBatch {
			reqs = nil
		}
	gather:
		for {
			select {
			case b.sem <- struct{}{}:
				break gather
			case r := <-reqs:
				if total+r.n > b.maxBatch {
					carry, reqs = r, nil
					continue
				}
				batch, total = append(batch, r), total+r.n
				if total >= b.maxBatch {
					reqs = nil
				}
			case <-b.ctx.Done():
				if carry != nil {
					batch = append(batch, carry)
				}
				fail(batch, ErrBatcherClosed)
				b.failPending()
				return
			}
		}
		// Take whatever else is already queued and fits.
	drain:
		for carry == nil && total < b.maxBatch {
			select {
			case r := <-b.reqs:
				if total+r.n > b.maxBatch {
					carry = r
					break drain
				}
				batch, total = append(batch, r), total+r.n
			default:
				break drain
			}
		}
		if b.ctx.Err() != nil {
			// Closed while the batch formed: no allocation starts.
			<-b.sem
			if carry != nil {
				batch = append(batch, carry)
			}
			fail(batch, ErrBatcherClosed)
			b.failPending()
			return
		}
		b.goFunc(func() { b.run(batch) })
	}
}

// run allocates one range for batch and hands each caller its part.
func (b *Batcher) run(batch []*batchReq) {
	defer func() { <-b.sem }()
	live, total := batch[:0], 0
	for _, r := range batch {
		if r.ctx.Err() == nil {
			live, total = append(live, r), total+r.n
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	rng, err := b.alloc(ctx, total)
	if err != nil {
		fail(live, err)
		return
	}
	next := rng.First
	for _, r := range live {
		r.res <- batchRes{r: Range{First: next, Count: r.n, Term: rng.Term, Index: rng.Index, Leader: rng.Leader}}
		next += int64(r.n)
	}
}

func fail(batch []*batchReq, err error) {
	for _, r := range batch {
		r.res <- batchRes{err: err}
	}
}

func (b *Batcher) failPending() {
	for {
		select {
		case r := <-b.reqs:
			r.res <- batchRes{err: ErrBatcherClosed}
		default:
			return
		}
	}
}
