package lockclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/netfault"
)

// TestRedlockMastersDown: with 2 of 5 masters down the lock works; with 3
// down it fails at once with an error naming the failed masters, and the
// two live masters keep no key.
func TestRedlockMastersDown(t *testing.T) {
	tr := startMasters(t, 5)
	c := tr.client(t, nil, WithRetry(NoRetry()))
	tr.servers[0].Kill()
	tr.servers[1].Kill()

	l := mustAcquire(t, c, "down")
	if err := l.Refresh(ctxT(t)); err != nil {
		t.Fatalf("Refresh with 3 of 5 up: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("Release with 3 of 5 up: %v", err)
	}

	tr.servers[2].Kill()
	start := time.Now()
	_, err := c.Acquire(ctxT(t), "down")
	t.Logf("failed after %v", time.Since(start))
	var nae *NotAcquiredError
	if !errors.As(err, &nae) {
		t.Fatalf("Acquire with 3 of 5 down: %v, want a *NotAcquiredError", err)
	}
	t.Logf("3 of 5 down: %v", err)
	if got, want := len(nae.Failed), 3; got != want {
		t.Fatalf("Failed=%v, want %d masters", nae.Failed, want)
	}
	if nae.NodeErrs == nil {
		t.Fatal("no node errors in the NotAcquiredError")
	}
	for i, v := range tr.values(t, "down") {
		if i >= 3 && v != "" {
			t.Fatalf("master %d keeps a partial lock %q", i, v)
		}
	}
}

// TestRedlockSlowMasters: masters behind a delaying relay count against the
// validity. Two slow masters out of five do not matter (the quorum comes
// from the fast ones); three slow ones take the grant past a short TTL, so
// the lock is refused although every master said yes, and nothing stays
// behind.
func TestRedlockSlowMasters(t *testing.T) {
	tr := startMasters(t, 5)
	relays := make([]*netfault.Relay, 5)
	for i, s := range tr.servers {
		r, err := netfault.NewRelay("127.0.0.1:0", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		relays[i] = r
	}
	viaRelays := &testRedis{servers: tr.servers, prefix: tr.prefix}
	for _, r := range relays {
		viaRelays.clients = append(viaRelays.clients, newRedisClient(t, r.Addr()))
	}
	const ttl = 400 * time.Millisecond
	c := viaRelays.client(t, nil, WithTTL(ttl), WithNodeTimeout(3*time.Second), WithRetry(NoRetry()))

	for _, r := range relays[:2] {
		r.SetDelay(300 * time.Millisecond)
	}
	l := mustAcquire(t, c, "slow")
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}

	relays[2].SetDelay(300 * time.Millisecond) // 3 of 5 slow: a round trip takes >= 600ms > TTL
	start := time.Now()
	_, err := c.TryAcquire(ctxT(t), "slow")
	var nae *NotAcquiredError
	if !errors.As(err, &nae) || !nae.Expired {
		t.Fatalf("TryAcquire with 3 slow masters: %v, want a *NotAcquiredError with Expired", err)
	}
	t.Logf("after %v: %v", time.Since(start), err)
	for _, r := range relays {
		r.SetDelay(0)
	}
	for i, v := range tr.values(t, "slow") {
		if v != "" {
			t.Fatalf("master %d keeps %q after the refused grant", i, v)
		}
	}
}

// TestConcurrentCycles: 64 goroutines each lock and release their own
// resource repeatedly on five masters, so that requests to one master are
// pipelined together; every cycle succeeds and nothing stays behind.
func TestConcurrentCycles(t *testing.T) {
	tr := startMasters(t, 5)
	c := tr.client(t, nil, WithRetry(NoRetry()))
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := fmt.Sprintf("w%d", w)
			for range 20 {
				l, err := c.TryAcquire(ctx, res)
				if err != nil {
					t.Errorf("TryAcquire(%s): %v", res, err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release(%s): %v", res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for w := range 64 {
		for i, v := range tr.values(t, fmt.Sprintf("w%d", w)) {
			if v != "" {
				t.Fatalf("w%d left on master %d", w, i)
			}
		}
	}
}

// TestRefreshWithMastersDown: when a majority of masters cannot be reached
// (rather than refusing), Refresh fails without declaring the lock lost:
// it stays held until its validity passes, and then Done closes. The error
// says neither that the lock is lost nor that it was not acquired: it is
// held, and a later Refresh may extend it.
func TestRefreshWithMastersDown(t *testing.T) {
	tr := startMasters(t, 5)
	c := tr.client(t, nil, WithTTL(time.Second), WithNodeTimeout(200*time.Millisecond))
	l := mustAcquire(t, c, "r")
	for _, s := range tr.servers[:3] {
		s.Kill()
	}
	err := l.Refresh(ctxT(t))
	if err == nil || errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotAcquired) || !errors.Is(err, NodeUnreachable) {
		t.Fatalf("Refresh with 3 of 5 masters down: %v, want NodeUnreachable without ErrLockLost or ErrNotAcquired", err)
	}
	if time.Now().Before(l.ValidUntil()) {
		select {
		case <-l.Done():
			t.Fatalf("Done closed before the validity passed: %v", context.Cause(l.Context()))
		default:
		}
	}
	waitDone(t, l, "the validity to pass")
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause=%v, want ErrLockLost", cause)
	}
}
