package lockclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLeaseAcrossSuspend: the machine sleeps an hour while a 30s lock is
// held. Redis expired the key meanwhile; Go's timers and time.Now's
// monotonic reading did not move (the fake clock jumps, Go's clocks do
// not, as with a real suspend). The lease is over the moment the process
// runs again: Done is closed, whether the clock's wake-up has run yet or
// not, ValidUntil lies in the past, contexts derived from the lease are
// cancelled, Refresh reports the loss.
func TestLeaseAcrossSuspend(t *testing.T) {
	tr := sharedRedis(t)
	clk := newFakeClock()
	c := tr.client(t, nil, WithTTL(30*time.Second), withClock(clk))
	const slept = time.Hour

	lost := func(t *testing.T, l *Lock) {
		t.Helper()
		if left := time.Until(l.ValidUntil()); left > -slept+time.Minute {
			t.Fatalf("ValidUntil is %v from now after sleeping %v with a 30s lease", left, slept)
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("Done still open after the suspend")
		}
		cause := context.Cause(l.Context())
		if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "validity passed") {
			t.Fatalf("cause %v, want ErrLockLost: validity passed", cause)
		}
		if err := l.Refresh(ctxT(t)); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Refresh after the suspend: %v, want ErrLockLost", err)
		}
	}

	t.Run("wake-up at resume", func(t *testing.T) {
		l := mustAcquire(t, c, "suspend-wakeup")
		defer l.Release(context.Background())
		derived, cancel := context.WithCancel(l.Context())
		defer cancel()
		done := l.Done() // taken before the suspend, as a waiting goroutine holds it
		clk.jump(slept)
		clk.fire() // what the timerfd does as the system resumes
		select {
		case <-done:
		default:
			t.Fatal("the wake-up at resume did not close Done")
		}
		select {
		case <-derived.Done():
		default:
			t.Fatal("a context derived from the lease is still live")
		}
		lost(t, l)
	})

	t.Run("read before the wake-up", func(t *testing.T) {
		for _, read := range []struct {
			name string
			f    func(l *Lock) bool // reports the lease over
		}{
			{"Done", func(l *Lock) bool {
				select {
				case <-l.Done():
					return true
				default:
					return false
				}
			}},
			{"Context.Err", func(l *Lock) bool { return l.Context().Err() != nil }},
			{"context.Cause", func(l *Lock) bool { return context.Cause(l.Context()) != nil }},
			{"ValidUntil", func(l *Lock) bool { return time.Now().After(l.ValidUntil()) }},
		} {
			t.Run(read.name, func(t *testing.T) {
				l := mustAcquire(t, c, "suspend-read")
				defer l.Release(context.Background())
				clk.jump(slept) // no fire: the reader runs first
				if !read.f(l) {
					t.Fatalf("%s after the suspend says the lease is still on", read.name)
				}
				lost(t, l)
			})
		}
	})

	t.Run("a grant that spans a suspend is refused", func(t *testing.T) {
		tr := sharedRedis(t)
		rdb := tr.clients[0].(*redis.Client)
		rdb.AddHook(suspendDuringSet{clk: clk, d: slept})
		c := tr.client(t, nil, WithTTL(30*time.Second), withClock(clk), WithRetry(NoRetry()))
		_, err := c.TryAcquire(ctxT(t), "suspend-grant")
		var nae *NotAcquiredError
		if !errors.As(err, &nae) || !nae.Expired {
			t.Fatalf("TryAcquire across a suspend: %v, want a *NotAcquiredError with Expired", err)
		}
		if v := tr.values(t, "suspend-grant"); v[0] != "" {
			t.Fatalf("the refused grant left its key: %q", v[0])
		}
	})
}

// TestRefreshWhileLeaseEnds: the lease ends (the clock's wake-up runs)
// while a Refresh is on its way to Redis; Refresh reports the loss rather
// than the extension, and returns.
func TestRefreshWhileLeaseEnds(t *testing.T) {
	tr := sharedRedis(t)
	clk := newFakeClock()
	c := tr.client(t, nil, WithTTL(30*time.Second), withClock(clk))
	l := mustAcquire(t, c, "refresh-race")
	tr.clients[0].(*redis.Client).AddHook(suspendDuringScript{clk: clk, d: time.Hour})
	done := make(chan error, 1)
	go func() { done <- l.Refresh(ctxT(t)) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("Refresh: %v, want ErrLockLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Refresh did not return") // and the lock is stuck: no Release
	}
	l.Release(ctxT(t))
}

// suspendDuringScript jumps the clock and runs its wake-up while a script
// (an extension) is on its way.
type suspendDuringScript struct {
	clk *fakeClock
	d   time.Duration
}

func (h suspendDuringScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h suspendDuringScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.clk.jump(h.d)
			h.clk.fire()
		}
		return err
	}
}

func (h suspendDuringScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// suspendDuringSet jumps the clock while SET is on its way, as a suspend
// between the request and its answer would.
type suspendDuringSet struct {
	clk *fakeClock
	d   time.Duration
}

func (h suspendDuringSet) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h suspendDuringSet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "set" {
			h.clk.jump(h.d)
		}
		return err
	}
}

func (h suspendDuringSet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
