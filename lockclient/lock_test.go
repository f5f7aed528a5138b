package lockclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// TestMutualExclusionEfficiency: 50 goroutines contend for one resource;
// never two inside at once, in both modes.
func TestMutualExclusionEfficiency(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(*testing.T) *testRedis
	}{
		{"single", sharedRedis},
		{"redlock5", func(t *testing.T) *testRedis { return startMasters(t, 5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := tc.redis(t)
			c := tr.client(t, nil, WithTTL(10*time.Second))
			holds := contend(t, c, "mutex", 50)
			if got := len(holds); got != 50 {
				t.Fatalf("holds=%d, want 50", got)
			}
			if v := tr.values(t, "mutex"); v[0] != "" {
				t.Fatalf("key left behind: %q", v)
			}
		})
	}
}

// contend runs n goroutines that each take the lock once, check nobody else
// is inside, and release; it returns the tokens in the order held.
func contend(t *testing.T, c *Client, resource string, n int) []int64 {
	t.Helper()
	var (
		inside atomic.Int32
		mu     sync.Mutex
		order  []int64
		wg     sync.WaitGroup
	)
	ctx := ctxT(t)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, resource)
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			if k := inside.Add(1); k != 1 {
				t.Errorf("%d holders inside at once", k)
			}
			mu.Lock()
			order = append(order, l.Token())
			mu.Unlock()
			time.Sleep(time.Millisecond) // hold it for a moment: widen any overlap
			inside.Add(-1)
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		}()
	}
	wg.Wait()
	return order
}

// TestTryAcquireHeld: a second TryAcquire fails with a NotAcquiredError
// naming the node; Acquire with a cancelled ctx reports the cancellation.
func TestTryAcquireHeld(t *testing.T) {
	tr := sharedRedis(t)
	c := tr.client(t, nil)
	l := mustAcquire(t, c, "held")
	defer l.Release(context.Background())

	_, err := c.TryAcquire(ctxT(t), "held")
	var nae *NotAcquiredError
	if !errors.As(err, &nae) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held lock: %v, want a *NotAcquiredError", err)
	}
	if got, want := len(nae.Taken), 1; got != want {
		t.Fatalf("Taken=%v, want %d node", nae.Taken, want)
	}

	// The retry strategy cancels the context: Acquire is between attempts.
	ctx, cancel := context.WithCancel(context.Background())
	cancelling := tr.client(t, nil, WithRetry(retryFunc(func(int) (time.Duration, bool) {
		cancel()
		return time.Millisecond, true
	})))
	_, err = cancelling.Acquire(ctx, "held")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire with a cancelled ctx: %v, want context.Canceled and ErrNotAcquired", err)
	}
}

// TestReleaseNeverDeletesAnothersLock: A's lock expires, B takes it; A's
// Release and Refresh fail with ErrLockLost and B's key stays.
func TestReleaseNeverDeletesAnothersLock(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(map[int]string{1: "single", 5: "redlock5"}[n], func(t *testing.T) {
			var tr *testRedis
			if n == 1 {
				tr = sharedRedis(t)
			} else {
				tr = startMasters(t, n)
			}
			short := tr.client(t, nil, WithTTL(200*time.Millisecond))
			a := mustAcquire(t, short, "r")
			waitDone(t, a, "A's validity to pass")
			if cause := context.Cause(a.Context()); !errors.Is(cause, ErrLockLost) {
				t.Fatalf("cause=%v, want ErrLockLost", cause)
			}
			long := tr.client(t, nil, WithTTL(30*time.Second))
			b := mustAcquire(t, long, "r") // waits until A's keys expire
			defer b.Release(context.Background())

			before := tr.values(t, "r")
			if err := a.Refresh(ctxT(t)); !errors.Is(err, ErrLockLost) {
				t.Fatalf("A.Refresh: %v, want ErrLockLost", err)
			}
			if err := a.Release(ctxT(t)); !errors.Is(err, ErrLockLost) {
				t.Fatalf("A.Release: %v, want ErrLockLost", err)
			}
			if err2 := a.Release(ctxT(t)); !errors.Is(err2, ErrLockLost) {
				t.Fatalf("second A.Release: %v, want the first result", err2)
			}
			held := 0
			for i, v := range tr.values(t, "r") {
				if before[i] == b.value {
					held++
					if v != b.value {
						t.Fatalf("node %d holds %q after A's release, want B's value %q", i, v, b.value)
					}
				}
			}
			if held < short.Quorum() {
				t.Fatalf("B's value on %d nodes before A's release, want at least %d", held, short.Quorum())
			}
			select {
			case <-b.Done():
				t.Fatalf("B's lock ended: %v", context.Cause(b.Context()))
			default:
			}
			if err := b.Refresh(ctxT(t)); err != nil {
				t.Fatalf("B.Refresh: %v", err)
			}
		})
	}
}

// TestRefreshLostLock: when the key is deleted behind the holder's back,
// Refresh fails with ErrLockLost (not ErrNotAcquired: a Refresh acquires
// nothing) and Done closes at once.
func TestRefreshLostLock(t *testing.T) {
	tr := sharedRedis(t)
	c := tr.client(t, nil, WithTTL(30*time.Second))
	l := mustAcquire(t, c, "gone")
	if err := l.Refresh(ctxT(t)); err != nil {
		t.Fatalf("Refresh of a held lock: %v", err)
	}
	if err := tr.clients[0].Del(ctxT(t), tr.prefix+"gone").Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctxT(t)); !errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Refresh after the key was deleted: %v, want ErrLockLost and not ErrNotAcquired", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after a refused refresh")
	}
}

// TestWatchdog: auto-refresh keeps a lock past several TTLs and signals the
// loss through Done when the key disappears.
func TestWatchdog(t *testing.T) {
	tr := sharedRedis(t)
	const ttl = time.Second
	c := tr.client(t, nil, WithTTL(ttl), WithAutoRefresh(0), WithNodeTimeout(200*time.Millisecond))
	l := mustAcquire(t, c, "wd")
	first := l.ValidUntil()
	testutil.Eventually(t, 30*time.Second, "the watchdog to extend the lock past 2 TTLs", func() bool {
		return l.ValidUntil().Sub(first) > 2*ttl
	})
	select {
	case <-l.Done():
		t.Fatalf("lock lost under the watchdog: %v", context.Cause(l.Context()))
	default:
	}
	if err := tr.clients[0].Del(ctxT(t), tr.prefix+"wd").Err(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, l, "the watchdog to notice the lost key")
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause=%v, want ErrLockLost", cause)
	}
}

// TestReleaseClosesDone: Release ends the lease with cause ErrReleased and
// is idempotent.
func TestReleaseClosesDone(t *testing.T) {
	tr := sharedRedis(t)
	c := tr.client(t, nil)
	l := mustAcquire(t, c, "rel")
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
		t.Fatalf("cause=%v, want ErrReleased", cause)
	}
	if err := l.Refresh(ctxT(t)); !errors.Is(err, ErrReleased) {
		t.Fatalf("Refresh after Release: %v, want ErrReleased", err)
	}
	if v := tr.values(t, "rel"); v[0] != "" {
		t.Fatalf("key still set after Release: %q", v[0])
	}
}

// TestCloseWaitsForItsGoroutines: Close stops the watchdogs of locks still
// held and returns only once every goroutine the client started (watchdogs,
// node flushers) has ended; no refresh reaches Redis after it returned.
func TestCloseWaitsForItsGoroutines(t *testing.T) {
	tr := sharedRedis(t)
	// Earlier tests may have left locks with watchdogs of their own.
	before := len(clientGoroutines())
	// The locks outlive the test (they expire after their TTL, and say so
	// in the log): the client logs nowhere.
	c := tr.client(t, nil, WithTTL(2*time.Second), WithAutoRefresh(20*time.Millisecond), WithNodeTimeout(time.Second),
		WithLogger(slog.New(slog.DiscardHandler)))
	var held []*Lock
	for i := range 8 {
		held = append(held, mustAcquire(t, c, fmt.Sprintf("close-%d", i)))
	}
	first := held[0].ValidUntil()
	testutil.Eventually(t, 30*time.Second, "the watchdog to extend the lock", func() bool {
		return held[0].ValidUntil().After(first)
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if stacks := clientGoroutines(); len(stacks) > before {
		t.Fatalf("%d goroutines of the client still run after Close (%d before it started):\n%s",
			len(stacks)-before, before, strings.Join(stacks, "\n\n"))
	}
	// With the watchdog gone the key's remaining time only falls.
	pttl := func() time.Duration {
		d, err := tr.clients[0].PTTL(ctxT(t), tr.prefix+"close-0").Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	left := pttl()
	time.Sleep(100 * time.Millisecond) // five watchdog intervals
	if after := pttl(); after >= left {
		t.Fatalf("the key's TTL went from %v to %v after Close: a refresh still ran", left, after)
	}
	if err := c.Close(); err != nil { // a second Close is harmless
		t.Fatal(err)
	}
}

// clientGoroutines returns the stacks of the goroutines running a
// watchdog or a node flusher.
func clientGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "lockclient.(*Lock).watchdog") || strings.Contains(g, "lockclient.(*node).flushLoop") {
			out = append(out, g)
		}
	}
	return out
}
