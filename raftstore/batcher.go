package raftstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
type Batcher struct {
	alloc       AllocFunc
	maxBatch    int
	timeout     time.Duration
	reqs        chan *batchReq
	sem         chan struct{}
	done        chan struct{}
	ctx         context.Context
	cancel      context.CancelFunc
	loopStopped chan struct{}
	running     sync.WaitGroup // batches in flight
	closed      chan struct{}  // closed when every request has its answer
	closeOnce   sync.Once
	received    atomic.Int64 // requests taken by loop, for tests
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
		alloc:       alloc,
		maxBatch:    DefaultMaxBatch,
		timeout:     10 * time.Second,
		reqs:        make(chan *batchReq, 1024),
		sem:         make(chan struct{}, DefaultMaxInflight),
		done:        make(chan struct{}),
		loopStopped: make(chan struct{}),
		closed:      make(chan struct{}),
	}
	for _, o := range opts {
		o(b)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	go b.loop()
	return b
}

// Next returns n consecutive tokens (n >= 1), allocated together with those
// of other concurrent callers.
func (b *Batcher) Next(ctx context.Context, n int) (Range, error) {
	req := &batchReq{ctx: ctx, n: max(1, n), res: make(chan batchRes, 1)}
	select {
	case <-b.done:
		return Range{}, ErrBatcherClosed
	default:
	}
	select {
	case b.reqs <- req:
	case <-b.done:
		return Range{}, ErrBatcherClosed
	case <-ctx.Done():
		return Range{}, ctx.Err()
	}
	select {
	case res := <-req.res:
		return res.r, res.err
	case <-ctx.Done():
		return Range{}, ctx.Err()
	case <-b.closed:
		select {
		case res := <-req.res:
			return res.r, res.err
		default:
			return Range{}, ErrBatcherClosed
		}
	}
}

// Close stops the batcher; pending and later calls fail with ErrBatcherClosed
// (in-flight allocations are cancelled).
func (b *Batcher) Close() {
	b.closeOnce.Do(func() {
		close(b.done)
		b.cancel()
		<-b.loopStopped
		b.running.Wait()
		b.failPending()
		close(b.closed)
	})
}

func (b *Batcher) loop() {
	defer close(b.loopStopped)
	// carry is a request taken from the queue that did not fit the batch
	// being formed; it opens the next one.
	var carry *batchReq
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-b.reqs:
				b.received.Add(1)
			case <-b.done:
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
				b.received.Add(1)
				if total+r.n > b.maxBatch {
					carry, reqs = r, nil
					continue
				}
				batch, total = append(batch, r), total+r.n
				if total >= b.maxBatch {
					reqs = nil
				}
			case <-b.done:
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
				b.received.Add(1)
				if total+r.n > b.maxBatch {
					carry = r
					break drain
				}
				batch, total = append(batch, r), total+r.n
			default:
				break drain
			}
		}
		b.running.Add(1)
		go b.run(batch)
	}
}

// run allocates one range for batch and hands each caller its part.
func (b *Batcher) run(batch []*batchReq) {
	defer b.running.Done()
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
