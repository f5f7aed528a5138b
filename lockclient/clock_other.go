//go:build !linux

package lockclient

import "time"

// bootClock outside Linux runs on Go's monotonic clock, which on most
// systems stops while the machine sleeps: a lease is then noticed lost only
// at the first read after the deadline has passed in awake time. fencegate
// targets Linux, where the lease runs on CLOCK_BOOTTIME.
type bootClock struct {
	origin   time.Time
	q        timerQueue
	fallback goTimerArm
}

func newBootClock() *bootClock {
	c := &bootClock{origin: time.Now()}
	c.q.arm = func(at time.Duration) { c.fallback.arm(at) }
	c.fallback = goTimerArm{now: c.now, fire: c.fire}
	return c
}

func (c *bootClock) now() time.Duration { return time.Since(c.origin) + time.Second }

func (c *bootClock) afterFunc(at time.Duration, f func()) timer { return c.q.add(at, f) }

func (c *bootClock) fire() {
	for _, t := range c.q.due(c.now()) {
		t.f()
	}
}
