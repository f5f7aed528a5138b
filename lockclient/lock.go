package lockclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lock is a held lock. Its methods are safe for concurrent use.
//
// The lease is over when Done is closed: after Release, or as soon as the
// lock is known lost: its validity passed, or a refresh found that a
// majority of nodes no longer hold it. Validity is measured on a clock that
// keeps counting while the system is suspended (CLOCK_BOOTTIME on Linux),
// as Redis's expiry of the key does: a process paused, or on a machine that
// slept, past its validity finds Done closed the moment it resumes.
type Lock struct {
	c        *Client
	resource string
	key      string
	value    string
	token    int64
	proof    string // the token's proof, "" when the token service does not sign (proof.go)

	ctx    *leaseContext
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	validUntil time.Duration // on c.clk
	timer      timer
	state      uint8 // lockHeld, lockLost or lockReleased

	releaseOnce sync.Once
	releaseErr  error
}

const (
	lockHeld uint8 = iota
	lockLost
	lockReleased
)

func (c *Client) newLock(resource, key, value string, token int64, validUntil time.Duration) *Lock {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lock{c: c, resource: resource, key: key, value: value, token: token,
		cancel: cancel, validUntil: validUntil}
	l.ctx = &leaseContext{Context: ctx, l: l}
	l.mu.Lock()
	l.timer = c.clk.afterFunc(validUntil, l.checkValidity)
	l.mu.Unlock()
	if c.opts.autoRefresh {
		every := c.opts.refreshEvery
		if every == 0 {
			every = c.opts.ttl / 3
		}
		c.goFunc(func() { l.watchdog(every) })
	}
	return l
}

// Token returns the lock's fencing token, greater than the token of every
// earlier holder of any lock minted by the same token service. It is 0 in
// efficiency mode (a client without a TokenSource).
func (l *Lock) Token() int64 { return l.token }

// Resource returns the name of the locked resource.
func (l *Lock) Resource() string { return l.resource }

// ValidUntil returns the time until which the lock is held for sure, unless
// a node restarts without persistence: the start of the last successful
// grant or extension + TTL − drift. It is computed at each call from the
// lease's clock, which counts time the system spent suspended, and carries
// a monotonic clock reading, so time.Until(l.ValidUntil()) is immune to
// wall-clock jumps. A time.Time kept across a suspend does not age with the
// lease: call ValidUntil again rather than keep its result.
func (l *Lock) ValidUntil() time.Time {
	now := l.c.clk.now()
	l.checkAt(now)
	l.mu.Lock()
	left := l.validUntil - now
	l.mu.Unlock()
	return time.Now().Add(left)
}

// Done returns a channel closed when the lease ends: on Release, or as soon
// as the lock is known lost. context.Cause(l.Context()) tells which
// (ErrReleased or an error matching ErrLockLost). Every call compares the
// validity with the clock first, so right after a resume Done is already
// closed even if the clock's wake-up has not run yet.
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Context returns a context cancelled when Done is closed. Derive the
// contexts of the work done under the lock from it to stop that work as
// soon as the lock is lost. Its Done, Err and Value compare the validity
// with the clock first, as Lock.Done does.
func (l *Lock) Context() context.Context { return l.ctx }

// leaseContext is the lock's context: it checks the validity on every read,
// so that no reader sees a live lease the clock says is over.
type leaseContext struct {
	context.Context // cancelled with the lease's cause
	l               *Lock
}

func (c *leaseContext) Done() <-chan struct{} { c.l.check(); return c.Context.Done() }
func (c *leaseContext) Err() error            { c.l.check(); return c.Context.Err() }

// Value also serves context.Cause, which reads the cause through it.
func (c *leaseContext) Value(key any) any { c.l.check(); return c.Context.Value(key) }

// cause is why the lease ended. Unlike context.Cause(l.Context()) it does
// not compare with the clock, so it may be called with l.mu held.
func (l *Lock) cause() error { return context.Cause(l.ctx.Context) }

// check ends the lease when its validity has passed.
func (l *Lock) check() { l.checkAt(l.c.clk.now()) }

func (l *Lock) checkAt(now time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == lockHeld && now >= l.validUntil {
		l.expireLocked()
	}
}

// checkValidity runs when the clock reaches the validity.
func (l *Lock) checkValidity() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == lockHeld && l.c.clk.now() >= l.validUntil {
		l.expireLocked()
	}
}

// expireLocked ends the lease because its validity passed; l.mu is held.
func (l *Lock) expireLocked() {
	l.loseLocked(fmt.Errorf("lockclient: lock %q: validity passed %v ago: %w",
		l.resource, (l.c.clk.now() - l.validUntil).Round(time.Millisecond), ErrLockLost))
}

// loseLocked marks the lock lost; l.mu is held.
func (l *Lock) loseLocked(cause error) {
	if l.state != lockHeld {
		return
	}
	l.state = lockLost
	l.timer.stop()
	l.cancel(cause)
	l.c.log.Warn("lock lost", "resource", l.resource, "token", l.token, "err", cause)
}

// Refresh extends the lock to a full TTL from now on every node where it is
// still held (compare-and-pexpire), counting the extension only when a
// majority did so within the new validity. When a majority answers that
// the lock is no longer held, or the answer comes after the validity
// passed, the lock is lost: Done closes and the error matches ErrLockLost.
// When nodes fail without a majority refusing, the lock stays held until
// its current ValidUntil and the error lists the node errors. A Refresh
// error never matches ErrNotAcquired: a refresh acquires nothing.
func (l *Lock) Refresh(ctx context.Context) error {
	l.mu.Lock()
	if l.state != lockHeld {
		st := l.state
		l.mu.Unlock()
		if st == lockReleased {
			return fmt.Errorf("lockclient: refresh %q: %w", l.resource, ErrReleased)
		}
		return fmt.Errorf("lockclient: refresh %q: %w", l.resource, l.cause())
	}
	l.mu.Unlock()

	res, err := l.c.extend(ctx, stepRefresh, l.resource, l.key, l.value)

	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.state == lockReleased:
		return fmt.Errorf("lockclient: refresh %q: %w", l.resource, ErrReleased)
	case l.state == lockLost:
		return fmt.Errorf("lockclient: refresh %q: %w", l.resource, l.cause())
	case l.c.clk.now() >= l.validUntil:
		// The answer came too late: between the old validity and now the
		// lock may have expired and been taken by someone else.
		cause := fmt.Errorf("lockclient: lock %q: extension came after the validity passed: %w", l.resource, ErrLockLost)
		l.loseLocked(cause)
		return cause
	case err == nil:
		if res.validUntil > l.validUntil {
			l.validUntil = res.validUntil
			l.timer.stop()
			l.timer = l.c.clk.afterFunc(res.validUntil, l.checkValidity)
		}
		return nil
	case res.tally.ctxErr != nil:
		return fmt.Errorf("lockclient: refresh %q: %w", l.resource, err)
	case len(l.c.nodes)-countState(res.tally, stateRefused) < l.c.quorum:
		cause := fmt.Errorf("lockclient: lock %q no longer held by a majority: %w", l.resource, errors.Join(ErrLockLost, err))
		l.loseLocked(cause)
		return cause
	default:
		return fmt.Errorf("lockclient: refresh %q: %w", l.resource, err)
	}
}

func countState(t *tally, s uint8) int {
	n := 0
	for _, st := range t.state {
		if st == s {
			n++
		}
	}
	return n
}

// Release deletes the lock on every node where it still holds this lock's
// value (compare-and-delete): it never deletes a lock another client took
// after this one expired. Done closes. Release is idempotent: later calls
// return the first call's result. The error matches ErrLockLost when the
// lock had been lost before it was released (the work done under it may
// have overlapped another holder's), and lists node errors when nodes
// could not be reached.
func (l *Lock) Release(ctx context.Context) error {
	l.releaseOnce.Do(func() { l.releaseErr = l.release(ctx) })
	return l.releaseErr
}

func (l *Lock) release(ctx context.Context) error {
	l.mu.Lock()
	wasLost := l.state == lockLost
	if l.state == lockHeld {
		l.state = lockReleased
		l.timer.stop()
		l.cancel(ErrReleased)
	}
	l.mu.Unlock()

	t := l.c.fanout(ctx, opRelease, l.key, l.value, true)
	switch {
	case wasLost:
		return fmt.Errorf("lockclient: release %q: %w", l.resource, l.cause())
	case t.ctxErr != nil:
		return fmt.Errorf("lockclient: release %q: %w", l.resource, errors.Join(append(t.errs, t.ctxErr)...))
	case t.ok >= l.c.quorum:
		return nil
	case len(t.errs) > 0:
		return fmt.Errorf("lockclient: release %q: deleted on %d of %d nodes: %w",
			l.resource, t.ok, len(l.c.nodes), errors.Join(t.errs...))
	default:
		return fmt.Errorf("lockclient: release %q: held by only %d of %d nodes: %w",
			l.resource, t.ok, len(l.c.nodes), ErrLockLost)
	}
}

// watchdog refreshes the lock every interval until the lease ends or the
// client is closed.
func (l *Lock) watchdog(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.c.closed:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.ctx, 2*l.c.opts.nodeTimeout)
		err := l.Refresh(ctx)
		cancel()
		if err != nil && l.ctx.Err() == nil {
			l.c.log.Warn("auto-refresh failed; retrying at the next tick", "resource", l.resource, "err", err)
		}
	}
}
