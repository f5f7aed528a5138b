package timeline

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// checkLayout lays out tl's labels as WriteSVG does and fails the test if
// two label boxes intersect, in one lane or across lanes, if a label
// covers a mark's shape, or if one runs off the picture. It returns the
// labels.
func checkLayout(t *testing.T, tl *Timeline) []placed {
	t.Helper()
	lanes := tl.Lanes()
	span := tl.Duration()
	if span <= 0 {
		span = time.Second
	}
	span += span / 50
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(d time.Duration) float64 { return svgLeft + plotW*float64(d)/float64(span) }
	const top = 100
	out := layout(lanes, top, x)
	for i, a := range out {
		if a.x0 < 0 || a.x1 > svgWidth {
			t.Errorf("label %q runs off the picture: %.0f-%.0f", a.text, a.x0, a.x1)
		}
		for _, b := range out[i+1:] {
			if a.overlaps(b.box) {
				t.Errorf("labels %q (lane %d, %.0f,%.0f-%.0f,%.0f) and %q (lane %d, %.0f,%.0f-%.0f,%.0f) intersect",
					a.text, a.lane, a.x0, a.y0, a.x1, a.y1, b.text, b.lane, b.x0, b.y0, b.x1, b.y1)
			}
		}
		for li, l := range lanes {
			for _, m := range l.Marks {
				if g, ok := glyphBox(m, x(m.At), markY(top+li*svgLaneH), len(l.Marks) > maxMarkLabel); ok && a.overlaps(g) {
					t.Errorf("label %q covers the %s mark %q of lane %d", a.text, m.Kind, m.Label, li)
				}
			}
		}
	}
	return out
}

// pausedHolder is the paused-holder demo's picture of run (a) as the demo
// records it, at the times (ms) of two runs measured: client 1 reads order
// 42 the moment it got its token and checks its lease, is stopped past its
// TTL and charges at nearly the same time as client 2.
func pausedHolder(hold1, lease1, pause0, pause1, read, check, hold2, hold2end, commit2, commit1 int) *Timeline {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tl := New("(a) straight to PostgreSQL", t0)
	tl.AddLane("client 1", "client 2")
	tl.Span("client 1", Hold, at(hold1), at(commit1+1), "token 1")
	tl.Span("client 1", Lease, at(hold1), at(lease1), "")
	tl.Mark("client 1", Expiry, at(lease1), "lease expired (TTL 1s)")
	tl.Span("client 1", Pause, at(pause0), at(pause1), "SIGSTOP")
	tl.Mark("client 1", Note, at(read), "reads order 42: unpaid")
	tl.Mark("client 1", Note, at(check), "checks its lease: valid")
	tl.Span("client 2", Hold, at(hold2), at(hold2end), "token 2")
	tl.Span("client 2", Lease, at(hold2), at(hold2end), "")
	tl.Mark("client 2", Accepted, at(commit2), "charge with token 2 committed")
	tl.Mark("client 1", Stale, at(commit1), "charge with token 1 committed")
	return tl
}

// The demo's picture: the "reads order 42" diamond does not sit on the
// token's label, the two commit labels do not stack on each other, and
// the labels of the writes always find a place.
func TestPausedHolderLabelsDoNotOverlap(t *testing.T) {
	// Two runs of the demo, times read off their pictures.
	for _, tl := range []*Timeline{
		pausedHolder(20, 1020, 250, 1250, 24, 224, 1050, 1320, 1249, 1264),
		pausedHolder(33, 1033, 235, 1250, 34, 235, 1040, 1248, 1248, 1256),
	} {
		placed := checkLayout(t, tl)
		got := map[string]bool{}
		for _, p := range placed {
			got[p.text] = true
		}
		for _, want := range []string{"token 1", "token 2", "SIGSTOP", "reads order 42: unpaid",
			"charge with token 2 committed", "charge with token 1 committed"} {
			if !got[want] {
				t.Errorf("label %q was left out of the picture", want)
			}
		}
	}
}

// Random lanes of holds, pauses and marks, crowded or not: no two labels
// ever intersect, and none covers a shape.
func TestRandomLayoutsDoNotOverlap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	kinds := []MarkKind{Accepted, Rejected, Stale, Expiry, Note}
	for run := range 300 {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
		tl := New("random", t0)
		end := 500 + r.IntN(5000)
		for c := range 1 + r.IntN(4) {
			lane := fmt.Sprintf("client %d", c+1)
			tl.AddLane(lane)
			for range r.IntN(4) {
				a := r.IntN(end)
				tl.Span(lane, Hold, at(a), at(a+r.IntN(end-a+1)), fmt.Sprintf("token %d", r.IntN(10000)))
			}
			if r.IntN(2) == 0 {
				a := r.IntN(end)
				tl.Span(lane, Pause, at(a), at(a+r.IntN(end-a+1)), "SIGSTOP")
			}
			for range r.IntN(16) {
				tl.Mark(lane, kinds[r.IntN(len(kinds))], at(r.IntN(end)), fmt.Sprintf("charge with token %d committed", r.IntN(100)))
			}
		}
		tl.Extend(at(end))
		checkLayout(t, tl)
		if t.Failed() {
			t.Fatalf("run %d", run)
		}
	}
}
