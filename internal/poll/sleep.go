package poll

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends; it reports whether the whole time
// passed with ctx still live. A d of 0 or less does not wait and reports
// whether ctx is live. It is the one pause between the attempts of a retry
// loop: the loop stops at once when its context ends, and leaves no timer
// behind.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
