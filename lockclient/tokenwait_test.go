package lockclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenservice"
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
// for a token at most WithTokenTimeout, and never past the grant's
// validity; a token service that is down ends it with its own error; the
// caller's cancellation ends it too. In every case the lock's key is gone
// and the error matches ErrTokenUnavailable, not ErrNotAcquired.
func TestTokenWaitBounded(t *testing.T) {
	tr := sharedRedis(t)
	down, err := tokenservice.NewClient([]string{"http://" + testutil.FreeAddr(t)}, tokenservice.WithLogger(testutil.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		tokens TokenSource
		opts   []Option
		want   []string
		is     error
	}{
		{"token timeout", context.Background(), &hangingSource{}, []Option{WithTokenTimeout(200 * time.Millisecond)},
			[]string{"none within 200ms (the token timeout)"}, context.DeadlineExceeded},
		{"grant's validity", context.Background(), &hangingSource{}, []Option{WithTTL(300 * time.Millisecond), WithTokenTimeout(time.Minute)},
			[]string{"(the grant's validity)"}, context.DeadlineExceeded},
		{"token service down", context.Background(), down, []Option{WithTokenTimeout(300 * time.Millisecond)},
			[]string{"connection refused"}, nil},
		{"caller cancels", cancelled, cancelSource{cancel}, nil, nil, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tr.client(t, tc.tokens, tc.opts...)
			err := acquireWithin(t, tc.ctx, c, "tokenwait")
			t.Logf("Acquire: %v", err)
			if !errors.Is(err, ErrTokenUnavailable) || errors.Is(err, ErrNotAcquired) {
				t.Fatalf("Acquire: %v, want ErrTokenUnavailable (and not ErrNotAcquired)", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Acquire: %v, want it to match %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Acquire: %v, want it to say %q", err, w)
				}
			}
			if v := tr.values(t, "tokenwait"); v[0] != "" {
				t.Fatalf("the granted key %q stays after the token failed", v[0])
			}
		})
	}
}

// cancelSource cancels the caller's context, then waits as hangingSource.
type cancelSource struct{ cancel context.CancelFunc }

func (s cancelSource) NextToken(ctx context.Context, _ string) (int64, error) {
	s.cancel()
	<-ctx.Done()
	return 0, ctx.Err()
}
