package lockclient

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeClock is a clock a test moves by hand. jump moves it as a suspend
// does: Go's timers do not notice; fire then runs what is due, as the
// timerfd's wake-up after the resume does.
type fakeClock struct {
	mu sync.Mutex
	t  time.Duration
	q  timerQueue
}

func newFakeClock() *fakeClock {
	c := &fakeClock{t: time.Hour}
	c.q.arm = func(time.Duration) {}
	return c
}

func (c *fakeClock) now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) afterFunc(at time.Duration, f func()) timer { return c.q.add(at, f) }

func (c *fakeClock) jump(d time.Duration) {
	c.mu.Lock()
	c.t += d
	c.mu.Unlock()
}

func (c *fakeClock) fire() {
	for _, t := range c.q.due(c.now()) {
		t.f()
	}
}

func withClock(c clock) Option { return func(o *options) { o.clock = c } }

func boottime(t *testing.T) time.Duration {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatalf("clock_gettime(CLOCK_BOOTTIME): %v", err)
	}
	return time.Duration(ts.Nano())
}

// TestBootClockReadsBoottime: the lease clock reads CLOCK_BOOTTIME, late
// by at most one system call (it adds a cached offset to the monotonic
// clock), never early.
func TestBootClockReadsBoottime(t *testing.T) {
	c := newBootClock()
	for range 1000 {
		before := boottime(t)
		got := c.now()
		after := boottime(t)
		if got < before || got > after+time.Millisecond {
			t.Fatalf("now()=%v, not within CLOCK_BOOTTIME readings %v and %v (+1ms)", got, before, after)
		}
	}
}

// TestBootClockSeesResume: across a suspend CLOCK_BOOTTIME and the wall
// clock move on while the monotonic clock stands still. The clock's cached
// offset is set back to what it was before a one-hour sleep (offset and
// wall − monotonic both an hour smaller); the next reading notices the
// wall clock's jump, reads the offset again and returns CLOCK_BOOTTIME,
// not a time an hour behind.
func TestBootClockSeesResume(t *testing.T) {
	c := newBootClock()
	c.now()
	s := c.offs.Load()
	c.offs.Store(&bootSync{offset: s.offset - time.Hour, skew: s.skew - int64(time.Hour)})
	before := boottime(t)
	if got := c.now(); got < before {
		t.Fatalf("now()=%v after the resume, CLOCK_BOOTTIME is %v: %v behind", got, before, before-got)
	}
}

// timeNamespaceOffset is how far CLOCK_BOOTTIME runs ahead of
// CLOCK_MONOTONIC in the time namespace of TestBootClockInTimeNamespace:
// the two clocks differ as they do on a machine that slept that long.
const timeNamespaceOffset = 100_000 * time.Second

// bootClockChild reports, in a time namespace whose CLOCK_BOOTTIME is ahead
// of CLOCK_MONOTONIC, what the lease clock reads and when a timer 50ms
// ahead fires.
func bootClockChild() int {
	var mono, boot unix.Timespec
	c := newBootClock()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	// start is read before the lease clock: the timer is due 50ms after
	// that reading, so at least 50ms after start whatever runs between.
	start := time.Now()
	now := c.now()
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot)
	fired := make(chan time.Duration, 1)
	c.afterFunc(now+50*time.Millisecond, func() { fired <- time.Since(start) })
	select {
	case d := <-fired:
		fmt.Println("CLOCK", mono.Nano(), now.Nanoseconds(), boot.Nano(), d.Nanoseconds())
	case <-time.After(10 * time.Second):
		fmt.Println("CLOCK timer did not fire")
	}
	return 0
}

// TestBootClockInTimeNamespace: in a Linux time namespace whose
// CLOCK_BOOTTIME runs 100,000 s ahead of CLOCK_MONOTONIC (what a machine
// that slept that long sees), the lease clock follows CLOCK_BOOTTIME, and
// its timer, armed on the same clock, fires on time. A clock on
// CLOCK_MONOTONIC (Go's timers, time.Since) would read 100,000 s behind.
func TestBootClockInTimeNamespace(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) not found: %v", err)
	}
	args := []string{"--time", "--boottime", strconv.Itoa(int(timeNamespaceOffset / time.Second))}
	if os.Geteuid() != 0 {
		args = append([]string{"--user", "--map-root-user"}, args...)
	}
	cmd := exec.Command(unshare, append(args, os.Args[0], "-test.run=^$")...)
	cmd.Env = append(os.Environ(), childEnv+"=boot-clock")
	cmd.Stderr = testWriter{t}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run the test binary in a time namespace (unshare %s): %v", strings.Join(args, " "), err)
	}
	line := bufio.NewScanner(strings.NewReader(string(out)))
	if !line.Scan() {
		t.Fatal("child printed nothing")
	}
	f := strings.Fields(line.Text())
	if len(f) != 5 || f[0] != "CLOCK" {
		t.Fatalf("child said %q", line.Text())
	}
	var v [4]time.Duration
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			t.Fatalf("child said %q: %v", line.Text(), err)
		}
		v[i] = time.Duration(n)
	}
	mono, now, boot, fired := v[0], v[1], v[2], v[3]
	t.Logf("in the namespace: CLOCK_MONOTONIC %v, lease clock %v, CLOCK_BOOTTIME %v; a 50ms timer fired after %v", mono, now, boot, fired)
	if now > boot || boot-now > time.Second {
		t.Fatalf("lease clock %v, CLOCK_BOOTTIME read right after %v: not CLOCK_BOOTTIME", now, boot)
	}
	if now-mono < timeNamespaceOffset-time.Second {
		t.Fatalf("lease clock %v is only %v ahead of CLOCK_MONOTONIC, want about %v", now, now-mono, timeNamespaceOffset)
	}
	if fired < 50*time.Millisecond {
		t.Fatalf("a timer 50ms ahead fired after %v", fired)
	}
}

// TestBootClockTimerfd: the wake-ups come from a timerfd on CLOCK_BOOTTIME
// with absolute deadlines, as /proc/self/fdinfo shows.
func TestBootClockTimerfd(t *testing.T) {
	c := newBootClock()
	tm := c.afterFunc(c.now()+time.Hour, func() {})
	defer tm.stop()
	if c.fd < 0 {
		t.Fatal("no timerfd: the clock fell back to Go timers")
	}
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", c.fd))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fdinfo:\n%s", info)
	fields := map[string]string{}
	for _, l := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if got, want := fields["clockid"], strconv.Itoa(unix.CLOCK_BOOTTIME); got != want {
		t.Fatalf("timerfd clockid=%q, want %s (CLOCK_BOOTTIME)", got, want)
	}
	flags, err := strconv.ParseUint(fields["settime flags"], 8, 32)
	if err != nil || flags&unix.TFD_TIMER_ABSTIME == 0 {
		t.Fatalf("timerfd settime flags=%q, want TFD_TIMER_ABSTIME", fields["settime flags"])
	}
}

// TestBootClockTimers: timers fire in deadline order, not before their
// deadline; a deadline already past fires at once; a stopped timer never
// fires; an earlier timer added after a later one re-arms the timerfd.
func TestBootClockTimers(t *testing.T) {
	c := newBootClock()
	type fire struct {
		name string
		at   time.Duration
		got  time.Duration
	}
	fired := make(chan fire, 10)
	add := func(name string, d time.Duration) timer {
		at := c.now() + d
		return c.afterFunc(at, func() { fired <- fire{name, at, c.now()} })
	}
	add("late", 300*time.Millisecond)
	stopped := add("stopped", 100*time.Millisecond)
	add("early", 50*time.Millisecond)
	add("past", -time.Second)
	if !stopped.stop() {
		t.Fatal("stop() of a pending timer = false")
	}
	if stopped.stop() {
		t.Fatal("second stop() = true")
	}
	var order []string
	for range 3 {
		select {
		case f := <-fired:
			if f.got < f.at {
				t.Fatalf("timer %s fired at %v, before its deadline %v", f.name, f.got, f.at)
			}
			order = append(order, f.name)
		case <-time.After(10 * time.Second):
			t.Fatalf("timers fired: %v, want 3", order)
		}
	}
	if got, want := strings.Join(order, ","), "past,early,late"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	select {
	case f := <-fired:
		t.Fatalf("timer %s fired after being stopped", f.name)
	case <-time.After(200 * time.Millisecond):
	}
}

// BenchmarkBootClockNow is the cost of one reading of the lease clock
// (time.Now plus a cached offset), beside time.Now and the clock_gettime
// system call it avoids (the vDSO serves Go's runtime CLOCK_MONOTONIC and
// CLOCK_REALTIME, not CLOCK_BOOTTIME).
func BenchmarkBootClockNow(b *testing.B) {
	c := newBootClock()
	b.Run("lease-clock", func(b *testing.B) {
		for b.Loop() {
			c.now()
		}
	})
	b.Run("clock_gettime-BOOTTIME", func(b *testing.B) {
		for b.Loop() {
			rawBoottime()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			time.Now()
		}
	})
}
