// Package timeline records what the clients of a lock did over time — who
// believed it held the lock and with which fencing token, when a process was
// paused, when a lease expired, which writes were accepted or rejected — and
// draws it as an SVG picture or as text for a terminal.
//
// A Timeline is safe for concurrent use while it is being recorded. Times are
// kept as offsets from the timeline's start, so two runs drawn one above the
// other share an axis that starts at zero.
package timeline

import (
	"sort"
	"sync"
	"time"
)

// SpanKind says what a Span shows.
type SpanKind int

const (
	// Hold is a time the client believed it held the lock.
	Hold SpanKind = iota
	// Pause is a time the client's process was stopped (SIGSTOP).
	Pause
	// Lease is the lock's lease as the lock service sees it: from the grant
	// until the TTL ran out or the lock was released.
	Lease
)

func (k SpanKind) String() string {
	switch k {
	case Hold:
		return "holds lock"
	case Pause:
		return "paused"
	case Lease:
		return "lease"
	}
	return "span"
}

// MarkKind says what a Mark shows.
type MarkKind int

const (
	// Accepted is a write the database committed.
	Accepted MarkKind = iota
	// Rejected is a write the fence rejected (SQLSTATE FG001).
	Rejected
	// Stale is a write that carried an outdated token and still landed:
	// the damage a fence prevents.
	Stale
	// Expiry is the moment a lease's TTL ran out.
	Expiry
	// Note is any other event worth a label (a read, a restart).
	Note
)

func (k MarkKind) String() string {
	switch k {
	case Accepted:
		return "write accepted"
	case Rejected:
		return "write rejected"
	case Stale:
		return "stale write landed"
	case Expiry:
		return "TTL expired"
	case Note:
		return "event"
	}
	return "mark"
}

// Span is an interval on a lane.
type Span struct {
	Kind       SpanKind
	Start, End time.Duration // offsets from the timeline's start
	Label      string
}

// Mark is an instant on a lane.
type Mark struct {
	Kind  MarkKind
	At    time.Duration // offset from the timeline's start
	Label string
}

// Lane is one row of the picture, usually one client.
type Lane struct {
	Name  string
	Spans []Span
	Marks []Mark
}

// Timeline is a titled set of lanes over a common time axis.
type Timeline struct {
	mu      sync.Mutex
	title   string
	caption string
	start   time.Time
	end     time.Duration
	lanes   []*Lane
}

// New returns an empty timeline whose zero is start.
func New(title string, start time.Time) *Timeline {
	return &Timeline{title: title, start: start}
}

// Title returns the title given to New.
func (t *Timeline) Title() string { return t.title }

// Start returns the instant the axis starts at.
func (t *Timeline) Start() time.Time { return t.start }

// SetCaption sets a line drawn under the title (a verdict, say).
func (t *Timeline) SetCaption(s string) {
	t.mu.Lock()
	t.caption = s
	t.mu.Unlock()
}

// Caption returns the caption.
func (t *Timeline) Caption() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.caption
}

// AddLane adds lanes in the given order, so they are drawn in that order
// whatever is recorded first. Existing lanes are left as they are.
func (t *Timeline) AddLane(names ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range names {
		t.lane(n)
	}
}

func (t *Timeline) lane(name string) *Lane {
	for _, l := range t.lanes {
		if l.Name == name {
			return l
		}
	}
	l := &Lane{Name: name}
	t.lanes = append(t.lanes, l)
	return l
}

func (t *Timeline) offset(at time.Time) time.Duration {
	d := at.Sub(t.start)
	if d < 0 {
		d = 0
	}
	if d > t.end {
		t.end = d
	}
	return d
}

// Span records an interval on lane from from to to.
func (t *Timeline) Span(lane string, kind SpanKind, from, to time.Time, label string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Span{Kind: kind, Start: t.offset(from), End: t.offset(to), Label: label}
	if s.End < s.Start {
		s.End = s.Start
	}
	l := t.lane(lane)
	l.Spans = append(l.Spans, s)
}

// Mark records an instant on lane.
func (t *Timeline) Mark(lane string, kind MarkKind, at time.Time, label string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.lane(lane)
	l.Marks = append(l.Marks, Mark{Kind: kind, At: t.offset(at), Label: label})
}

// Extend makes the axis reach at least at.
func (t *Timeline) Extend(at time.Time) {
	t.mu.Lock()
	t.offset(at)
	t.mu.Unlock()
}

// Duration returns the offset of the latest thing recorded.
func (t *Timeline) Duration() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.end
}

// Lanes returns a copy of the lanes, spans and marks sorted by time.
func (t *Timeline) Lanes() []Lane {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Lane, len(t.lanes))
	for i, l := range t.lanes {
		c := Lane{Name: l.Name, Spans: append([]Span(nil), l.Spans...), Marks: append([]Mark(nil), l.Marks...)}
		sort.SliceStable(c.Spans, func(a, b int) bool { return c.Spans[a].Start < c.Spans[b].Start })
		sort.SliceStable(c.Marks, func(a, b int) bool { return c.Marks[a].At < c.Marks[b].At })
		out[i] = c
	}
	return out
}

// Event is one labelled span or mark, for listing in time order.
type Event struct {
	At    time.Duration
	Lane  string
	What  string // the kind, as text
	Label string
	End   time.Duration // for spans; equal to At for marks
}

// Events lists the spans and marks that carry a label, in time order.
func (t *Timeline) Events() []Event {
	var ev []Event
	for _, l := range t.Lanes() {
		for _, s := range l.Spans {
			if s.Label != "" {
				ev = append(ev, Event{At: s.Start, End: s.End, Lane: l.Name, What: s.Kind.String(), Label: s.Label})
			}
		}
		for _, m := range l.Marks {
			if m.Label != "" {
				ev = append(ev, Event{At: m.At, End: m.At, Lane: l.Name, What: m.Kind.String(), Label: m.Label})
			}
		}
	}
	sort.SliceStable(ev, func(a, b int) bool { return ev[a].At < ev[b].At })
	return ev
}
