package lockclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// hangingSource never mints: it waits until its context ends, as a token
// service behind a black-holed network does.
type hangingSource struct{ calls int }

func (s *hangingSource) NextToken(ctx context.Context, _ string) (int64, error) {
	s.calls++
	<-ctx.Done()
	return 0, ctx.Err()
}

// acquireWithin runs Acquire and fails the test if it has not returned
// after 30s: every case below must end on lockclient's own bounds.
func acquireWithin(t *testing.T, ctx context.Context, c *Client, resource string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, resource)
		if l != nil {
			l.Release(context.Background())
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire still waiting after 30s")
		return nil
	}
}

// TestTokenWaitBounded: under a context without deadline, Acquire waits
// for tokens at most WithTokenTimeout over all its attempts; one wait also
// ends when the grant's validity passes, and then Acquire tries again
// within the bound; a token service that is down ends it with its own
// error; the caller's cancellation ends it too. In every case the lock's
// key is gone and the error matches ErrTokenUnavailable.
func TestTokenWaitBounded(t *testing.T) {
	tr := sharedRedis(t)
	down, err := tokenclient.NewClient([]string{"http://" + testutil.ClosedAddr(t)}, tokenclient.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		tokens   TokenSource
		opts     []Option
		want     []string
		is       error
		attempts int // the least number of times the token source is asked
	}{
		{"token timeout", context.Background(), &hangingSource{}, []Option{WithTokenTimeout(200 * time.Millisecond)},
			[]string{"none within 200ms (the token timeout)"}, context.DeadlineExceeded, 1},
		{"grant's validity, then the token timeout", context.Background(), &hangingSource{},
			[]Option{WithTTL(300 * time.Millisecond), WithTokenTimeout(time.Second)},
			[]string{"none within 1s (the token timeout)"}, context.DeadlineExceeded, 2},
		{"token service down", context.Background(), down, []Option{WithTokenTimeout(300 * time.Millisecond)},
			nil, tokenapi.ErrUnavailable, 0},
		{"caller cancels", cancelled, cancelSource{cancel}, nil, nil, context.Canceled, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tr.client(t, tc.tokens, tc.opts...)
			err := acquireWithin(t, tc.ctx, c, "tokenwait")
			t.Logf("Acquire: %v", err)
			if !errors.Is(err, ErrTokenUnavailable) {
				t.Fatalf("Acquire: %v, want ErrTokenUnavailable", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Acquire: %v, want it to match %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Acquire: %v, want it to say %q", err, w)
				}
			}
			if h, ok := tc.tokens.(*hangingSource); ok && h.calls < tc.attempts {
				t.Fatalf("the token source was asked %d times, want at least %d", h.calls, tc.attempts)
			}
			if v := tr.values(t, "tokenwait"); v[0] != "" {
				t.Fatalf("the granted key %q stays after the token failed", v[0])
			}
		})
	}

	// One attempt that outlives the grant's validity waiting for its token
	// is refused as not acquired: the lock is gone, not the token service.
	c := tr.client(t, &hangingSource{}, WithTTL(300*time.Millisecond))
	_, err = c.TryAcquire(context.Background(), "tokenwait")
	var nae *NotAcquiredError
	if !errors.As(err, &nae) || !nae.Expired || errors.Is(err, ErrTokenUnavailable) ||
		!strings.Contains(err.Error(), "validity was used up waiting for a token") {
		t.Fatalf("TryAcquire: %v, want a *NotAcquiredError with Expired", err)
	}
	t.Logf("TryAcquire: %v", err)
}

// cancelSource cancels the caller's context, then waits as hangingSource.
type cancelSource struct{ cancel context.CancelFunc }

func (s cancelSource) NextToken(ctx context.Context, _ string) (int64, error) {
	s.cancel()
	<-ctx.Done()
	return 0, ctx.Err()
}

// pausingSource plays a process stopped while its token request was on
// the wire: the first call finds, on waking, its deadline passed and the
// grant's validity with it (the clock jumps); later calls mint.
type pausingSource struct {
	clk   *fakeClock
	calls int
}

func (s *pausingSource) NextToken(ctx context.Context, _ string) (int64, error) {
	s.calls++
	if s.calls == 1 {
		s.clk.jump(time.Minute)
		return 0, context.DeadlineExceeded
	}
	return int64(s.calls), nil
}

// TestTokenWaitPaused: a holder paused past its grant's validity while
// waiting for its token has lost that grant, not its token service:
// Acquire tries again and gets the lock, with the second token.
func TestTokenWaitPaused(t *testing.T) {
	tr := sharedRedis(t)
	clk := newFakeClock()
	src := &pausingSource{clk: clk}
	c := tr.client(t, src, WithTTL(10*time.Second), withClock(clk))
	l, err := c.Acquire(context.Background(), "paused")
	if err != nil {
		t.Fatalf("Acquire after a pause during the token wait: %v", err)
	}
	defer l.Release(context.Background())
	if src.calls != 2 || l.Token() != 2 {
		t.Fatalf("token %d after %d calls, want the second call's token", l.Token(), src.calls)
	}
}
