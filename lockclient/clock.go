package lockclient

import (
	"container/heap"
	"sync"
	"time"
)

// clock is what a lease is measured on. now counts time through system
// suspend (CLOCK_BOOTTIME on Linux): Redis expires a key while the client's
// machine sleeps, so the lease must age then too. afterFunc runs f once now
// has reached at, also when that moment passed while the system was
// suspended (then right after the resume); f runs on the clock's goroutine
// and must be short.
//
// Go's own timers and the monotonic reading of time.Now run on
// CLOCK_MONOTONIC, which stops during suspend: they would keep a lease alive
// for as long as the machine slept. Tests replace the clock to jump it.
type clock interface {
	now() time.Duration
	afterFunc(at time.Duration, f func()) timer
}

// timer is a pending afterFunc.
type timer interface {
	// stop cancels the call; it reports whether the call was still pending.
	stop() bool
}

// systemClock is the clock of every Client not given another one.
var systemClock clock = newBootClock()

// timerHeap orders pending timers by deadline.
type timerHeap []*heapTimer

type heapTimer struct {
	at    time.Duration
	f     func()
	index int // position in the heap; -1 once fired or stopped
	q     *timerQueue
}

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*heapTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// timerQueue is the heap of pending timers shared by the real clock and
// the test clock. arm is called with q.mu held whenever the earliest
// deadline moved earlier than the one last armed.
type timerQueue struct {
	mu     sync.Mutex
	timers timerHeap
	armed  time.Duration // deadline last armed; 0 when none
	arm    func(at time.Duration)
}

func (q *timerQueue) add(at time.Duration, f func()) *heapTimer {
	t := &heapTimer{at: at, f: f, q: q}
	q.mu.Lock()
	heap.Push(&q.timers, t)
	if q.armed == 0 || at < q.armed {
		q.armed = at
		q.arm(at)
	}
	q.mu.Unlock()
	return t
}

func (t *heapTimer) stop() bool {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&q.timers, t.index)
	// The armed deadline may now be earlier than needed: the wake-up finds
	// nothing due and re-arms, which is cheaper than re-arming on every stop.
	return true
}

// due removes and returns the timers whose deadline is at or before now,
// and arms the next deadline.
func (q *timerQueue) due(now time.Duration) []*heapTimer {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*heapTimer
	for len(q.timers) > 0 && q.timers[0].at <= now {
		out = append(out, heap.Pop(&q.timers).(*heapTimer))
	}
	q.armed = 0
	if len(q.timers) > 0 {
		q.armed = q.timers[0].at
		q.arm(q.armed)
	}
	return out
}

// goTimerArm arms with a Go timer, which runs on CLOCK_MONOTONIC: a deadline
// that passes during suspend is noticed only when the timer fires after the
// resume, or at the next read of the lease (every read compares with now).
// It is the fallback where no timerfd can be had.
type goTimerArm struct {
	t    *time.Timer
	now  func() time.Duration
	fire func()
}

func (g *goTimerArm) arm(at time.Duration) {
	if g.t != nil {
		g.t.Stop()
	}
	g.t = time.AfterFunc(max(at-g.now(), 0), g.fire)
}
