// Package poll waits for a condition: it calls it every interval until it
// holds, the context ends or a timeout passes, and says what was awaited
// when it gives up (the shape of rqlite's NewPollTrue).
//
// Every loop of the harness that waits for something to become true (a
// server to answer, a leader to be elected, a process to stop) goes through
// Until, so that each says what it waited for and why it stopped waiting.
// Sleep is the pause between the attempts of the product packages' retry
// loops (raftstore, tokenclient, lockclient, pgfence, relay), which import
// this package for it alone.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout is wrapped by the error Until returns when timeout passed.
var ErrTimeout = errors.New("timed out")

type abortError struct{ err error }

func (a abortError) Error() string { return a.err.Error() }
func (a abortError) Unwrap() error { return a.err }

// Abort wraps err so that Until stops polling at once and returns err
// unwrapped: the condition can no longer become true (the process that was
// to answer has exited).
func Abort(err error) error { return abortError{err} }

// Until calls cond every interval until it returns nil. It gives up when
// cond returns an error made by Abort (returning that error), when ctx ends
// or when timeout passes (0: only ctx bounds it; a negative timeout allows
// one call); the error then names what was awaited and quotes cond's last
// error. cond gets ctx, bounded by timeout.
func Until(ctx context.Context, what string, interval, timeout time.Duration, cond func(context.Context) error) error {
	if timeout != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		var a abortError
		if errors.As(err, &a) {
			return a.err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && timeout != 0 {
				return fmt.Errorf("%w after %v waiting for %s: %w", ErrTimeout, timeout, what, err)
			}
			return fmt.Errorf("waiting for %s: %w (last: %w)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// True is Until with a boolean condition.
func True(ctx context.Context, what string, interval, timeout time.Duration, cond func() bool) error {
	return Until(ctx, what, interval, timeout, func(context.Context) error {
		if cond() {
			return nil
		}
		return errors.New("condition still false")
	})
}
