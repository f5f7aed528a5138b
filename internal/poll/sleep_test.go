package poll_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
)

// Sleep waits the whole time on a live context, and returns at once, false,
// when the context ends first.
func TestSleep(t *testing.T) {
	start := time.Now()
	if !poll.Sleep(context.Background(), 30*time.Millisecond) {
		t.Error("Sleep on a live context reported false")
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("Sleep(30ms) returned after %v", took)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	if poll.Sleep(ctx, time.Hour) {
		t.Error("Sleep reported true for a context that ended")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Sleep returned %v after its context ended", took)
	}

	if !poll.Sleep(context.Background(), 0) {
		t.Error("Sleep(0) on a live context reported false")
	}
	if poll.Sleep(ctx, 0) || poll.Sleep(ctx, -time.Second) {
		t.Error("Sleep on an ended context reported true")
	}
}
