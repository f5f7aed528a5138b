package lockclient

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME and wakes its timers with one timerfd on
// CLOCK_BOOTTIME armed at the earliest deadline (TFD_TIMER_ABSTIME). One
// goroutine reads the timerfd through Go's network poller, so no thread is
// parked on it; the kernel fires a deadline that passed while the system was
// suspended as soon as it resumes. It serves every Client of the process, as
// the Go runtime's own timers do.
//
// Reading CLOCK_BOOTTIME is a system call (the vDSO serves Go's runtime
// CLOCK_MONOTONIC and CLOCK_REALTIME only), 0.1 to several µs, and a lease
// is read on every Done, Context and query. now therefore adds to
// CLOCK_MONOTONIC (time.Now's monotonic reading) the offset
// CLOCK_BOOTTIME − CLOCK_MONOTONIC, which the kernel changes only when the
// system resumes from suspend, and which it read with one system call. A
// resume also moves CLOCK_REALTIME forward by the time slept, while
// CLOCK_MONOTONIC stands still: so when time.Now's wall reading minus its
// monotonic reading has moved by more than resyncAfter since the offset was
// read, now reads the offset again. A wall-clock step or NTP slewing past
// resyncAfter also triggers a read, which costs one system call and changes
// nothing.
type bootClock struct {
	once     sync.Once
	q        timerQueue
	fd       int // the timerfd; -1 when none (then fallback arms)
	file     *os.File
	fallback goTimerArm

	origin time.Time // carries the monotonic reading all others are taken against
	offs   atomic.Pointer[bootSync]
}

// bootSync is one reading of CLOCK_BOOTTIME − CLOCK_MONOTONIC.
type bootSync struct {
	offset time.Duration // CLOCK_BOOTTIME − monotonic time since origin
	skew   int64         // wall − monotonic time since origin, in ns, when read
}

// resyncAfter is how far wall − monotonic may move before the offset is
// read again; a suspend shorter than this may go unseen (the lease's drift
// allowance is at least 2ms).
const resyncAfter = time.Millisecond

func newBootClock() *bootClock {
	c := &bootClock{fd: -1, origin: time.Now()}
	c.q.arm = c.arm
	c.fallback = goTimerArm{now: c.now, fire: c.fire}
	return c
}

// now returns CLOCK_BOOTTIME: time since boot, suspend included. It may
// read up to one system call's duration late, never early.
func (c *bootClock) now() time.Duration {
	t := time.Now()
	mono := t.Sub(c.origin)
	skew := t.UnixNano() - int64(mono)
	s := c.offs.Load()
	if s == nil || time.Duration(skew-s.skew).Abs() > resyncAfter {
		s = c.resync(mono, skew)
	}
	return mono + s.offset
}

// resync reads CLOCK_BOOTTIME right after the monotonic reading mono.
// Reading it after errs on the late side: a lease ends a few µs early
// rather than late.
func (c *bootClock) resync(mono time.Duration, skew int64) *bootSync {
	s := &bootSync{offset: rawBoottime() - mono, skew: skew}
	c.offs.Store(s)
	return s
}

// rawBoottime reads CLOCK_BOOTTIME with a system call.
func rawBoottime() time.Duration {
	var ts unix.Timespec
	// CLOCK_BOOTTIME exists since Linux 2.6.39, older than any kernel Go
	// supports; clock_gettime cannot fail for it.
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}

func (c *bootClock) afterFunc(at time.Duration, f func()) timer {
	c.once.Do(c.start)
	return c.q.add(at, f)
}

// start creates the timerfd and its reader. Without a timerfd (a sandbox
// that forbids it) the clock arms Go timers instead.
func (c *bootClock) start() {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return
	}
	c.fd = fd
	c.file = os.NewFile(uintptr(fd), "lockclient-boottime-timerfd")
	go c.loop()
}

// arm sets the next wake-up; c.q.mu is held.
func (c *bootClock) arm(at time.Duration) {
	if c.fd >= 0 {
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(at))}
		if err := unix.TimerfdSettime(c.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err == nil {
			return
		}
	}
	c.fallback.arm(at)
}

// loop waits for the timerfd to expire and runs what is due.
func (c *bootClock) loop() {
	var buf [8]byte
	for {
		if _, err := c.file.Read(buf[:]); err != nil {
			// Reading an armed timerfd does not fail; should it ever, the
			// pending timers move to Go timers rather than spin here.
			c.q.mu.Lock()
			c.fd = -1
			if len(c.q.timers) > 0 {
				c.q.armed = c.q.timers[0].at
				c.fallback.arm(c.q.armed)
			}
			c.q.mu.Unlock()
			return
		}
		c.fire()
	}
}

func (c *bootClock) fire() {
	for _, t := range c.q.due(c.now()) {
		t.f()
	}
}
