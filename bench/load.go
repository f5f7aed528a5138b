package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Op is one operation of a closed-loop load; worker is the index (from 0)
// of the client running it.
type Op func(ctx context.Context, worker int) error

// RunClosed runs conc workers that each call op back to back, starting a new
// operation only while d has not passed, and summarizes the latencies of the
// operations that succeeded. Elapsed runs from the start until the last
// operation ended. Failed operations are counted in Result.Errors and the
// first failure is returned with the result. An operation still running 30s
// after d is cancelled; a worker pauses 10ms after a failure. If ctx ends, RunClosed returns its error.
func RunClosed(ctx context.Context, conc int, d time.Duration, op Op) (Result, error) {
	opCtx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()

	type worker struct {
		lats     []time.Duration
		errors   int
		firstErr error
	}
	ws := make([]worker, conc)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for i := range ws {
		w := &ws[i]
		w.lats = make([]time.Duration, 0, 4096)
		wg.Go(func() {
			for {
				t0 := time.Now()
				if !t0.Before(end) || opCtx.Err() != nil {
					return
				}
				err := op(opCtx, i)
				if err != nil {
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
					// Do not spin on a server that refuses at once.
					select {
					case <-opCtx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				w.lats = append(w.lats, time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var all []time.Duration
	errs := 0
	var firstErr error
	for _, w := range ws {
		all = append(all, w.lats...)
		errs += w.errors
		if firstErr == nil {
			firstErr = w.firstErr
		}
	}
	r := Summarize(all, errs, elapsed)
	if firstErr != nil {
		firstErr = fmt.Errorf("%d of %d operations failed, first: %w", errs, errs+r.Ops, firstErr)
	}
	return r, firstErr
}
