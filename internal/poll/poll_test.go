package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntilSucceeds(t *testing.T) {
	n := 0
	err := Until(context.Background(), "the third call", time.Millisecond, time.Minute, func(context.Context) error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Until=%v after %d calls, want nil after 3", err, n)
	}
}

func TestUntilTimeoutSaysWhat(t *testing.T) {
	err := Until(context.Background(), "the moon", time.Millisecond, 20*time.Millisecond, func(context.Context) error {
		return errors.New("still new moon")
	})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "the moon") || !strings.Contains(err.Error(), "still new moon") {
		t.Fatalf("Until=%v, want ErrTimeout naming what was awaited and the last error", err)
	}
}

func TestUntilAbort(t *testing.T) {
	stop := errors.New("gone for good")
	n := 0
	err := Until(context.Background(), "x", time.Millisecond, time.Minute, func(context.Context) error {
		n++
		return Abort(stop)
	})
	if err != stop || n != 1 {
		t.Fatalf("Until=%v after %d calls, want the aborting error after 1", err, n)
	}
}

func TestUntilContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := True(ctx, "y", time.Millisecond, 0, func() bool { return false })
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("True=%v, want context.Canceled", err)
	}
}
