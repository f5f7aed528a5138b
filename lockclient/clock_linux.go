package lockclient

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME and wakes its timers with one timerfd on
// CLOCK_BOOTTIME armed at the earliest deadline (TFD_TIMER_ABSTIME). One
// goroutine reads the timerfd through Go's network poller, so no thread is
// parked on it; the kernel fires a deadline that passed while the system was
// suspended as soon as it resumes. It serves every Client of the process, as
// the Go runtime's own timers do.
type bootClock struct {
	once     sync.Once
	q        timerQueue
	fd       int // the timerfd; -1 when none (then fallback arms)
	file     *os.File
	fallback goTimerArm
}

func newBootClock() *bootClock {
	c := &bootClock{fd: -1}
	c.q.arm = c.arm
	c.fallback = goTimerArm{now: c.now, fire: c.fire}
	return c
}

// now returns CLOCK_BOOTTIME: time since boot, suspend included.
func (c *bootClock) now() time.Duration {
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
