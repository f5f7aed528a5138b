package timeline

import (
	"math"
	"sort"
	"time"
)

// The picture's labels are laid out per panel (one timeline's lanes)
// before anything is drawn, so that no label covers another, in its lane
// or the next, nor a mark's shape: the shapes stay where their times put
// them, and the labels move around them or, when no place is free, are
// left to the shapes' tooltips.

// box is a rectangle of the picture, in pixels.
type box struct{ x0, y0, x1, y1 float64 }

func (a box) overlaps(b box) bool { return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 }

// labelHalo is the white outline drawn around label text (halo), on each side.
const labelHalo = 1.5

// textBox is the box text of width w and font size fs takes when drawn at
// (x, baseline y) with anchor, its halo included: about three quarters of
// the font size above the baseline and a quarter below.
func textBox(x, y, w, fs float64, anchor string) box {
	x0 := x
	switch anchor {
	case "middle":
		x0 = x - w/2
	case "end":
		x0 = x - w
	}
	return box{x0 - labelHalo, y - 0.75*fs - labelHalo, x0 + w + labelHalo, y + 0.25*fs + labelHalo}
}

// Kinds of label.
const (
	tokenLabel = iota // a hold's token, inside its bar
	pauseLabel        // a pause's label, inside its hatching
	markLabel         // a mark's label, above or below the marks
)

// placed is a label and where it goes.
type placed struct {
	box
	kind   int
	lane   int
	x, y   float64 // anchor point, baseline
	anchor string
	size   float64 // font size
	text   string
}

// Estimated widths of label text (Helvetica averages a little over half
// the font size; bold a little more).
func markLabelWidth(label string) float64  { return float64(len([]rune(label)))*5.6 + 4 }
func tokenLabelWidth(label string) float64 { return float64(len([]rune(label))) * 6.5 }
func pauseLabelWidth(label string) float64 { return float64(len([]rune(label))) * 6.5 }

// markY is the vertical middle of a lane's marks.
func markY(ly int) float64 { return float64(ly) + 23 }

// glyphBox is the box a mark's shape takes; Expiry's dashed line across
// the lane is not one (labels may cross it).
func glyphBox(m Mark, mx, cy float64, crowded bool) (box, bool) {
	switch m.Kind {
	case Accepted:
		r := 6.0
		if crowded {
			r = 4
		}
		return box{mx - r, cy - r, mx + r, cy + r}, true
	case Rejected:
		return box{mx - 7.5, cy - 7.5, mx + 7.5, cy + 7.5}, true
	case Stale:
		return box{mx - 7.5, cy - 8.5, mx + 7.5, cy + 6.5}, true
	case Note:
		return box{mx - 5.5, cy - 5.5, mx + 5.5, cy + 5.5}, true
	}
	return box{}, false
}

// layout places the labels of one panel whose first lane starts at top:
// the tokens of the holds first, then the pauses' labels, then the marks'
// labels, the writes' before the others, each in time order. Each label takes the first place free of the
// shapes and of the labels placed before it; a label with no free place is
// not drawn.
func layout(lanes []Lane, top int, x func(time.Duration) float64) []placed {
	var taken []box
	free := func(b box) bool {
		if b.x0 < svgLeft-10 || b.x1 > svgWidth-2 {
			return false
		}
		for _, t := range taken {
			if b.overlaps(t) {
				return false
			}
		}
		return true
	}
	for li, l := range lanes {
		ly := top + li*svgLaneH
		crowded := len(l.Marks) > maxMarkLabel
		for _, m := range l.Marks {
			if g, ok := glyphBox(m, x(m.At), markY(ly), crowded); ok {
				taken = append(taken, g)
			}
		}
	}
	var out []placed
	put := func(p placed) {
		taken = append(taken, p.box)
		out = append(out, p)
	}
	// A token goes at the start of its hold, or as near it as the shapes
	// on the bar allow, and inside the bar.
	for li, l := range lanes {
		ly := top + li*svgLaneH
		for _, s := range l.Spans {
			if s.Kind != Hold || s.Label == "" {
				continue
			}
			x0, x1 := x(s.Start), x(s.End)
			w := tokenLabelWidth(s.Label)
			for tx := x0 + 4; tx+w <= x1-2; {
				b := textBox(tx, float64(ly+27), w, 11, "start")
				if free(b) {
					put(placed{box: b, kind: tokenLabel, lane: li, x: tx, y: float64(ly + 27), anchor: "start", size: 11, text: s.Label})
					break
				}
				next := tx + 2
				for _, t := range taken {
					if b.overlaps(t) && t.x1+labelHalo+1 > next {
						next = t.x1 + labelHalo + 1
					}
				}
				tx = next
			}
		}
	}
	for li, l := range lanes {
		ly := top + li*svgLaneH
		for _, s := range l.Spans {
			if s.Kind != Pause || s.Label == "" {
				continue
			}
			x0, x1 := x(s.Start), x(s.End)
			w := pauseLabelWidth(s.Label)
			for _, px := range []float64{(x0 + x1) / 2, x1 - 4 - w/2, x0 + 4 + w/2} {
				b := textBox(px, float64(ly+27), w, 11, "middle")
				if b.x0 >= x0 && b.x1 <= x1 && free(b) {
					put(placed{box: b, kind: pauseLabel, lane: li, x: px, y: float64(ly + 27), anchor: "middle", size: 11, text: s.Label})
					break
				}
			}
		}
	}
	type cand struct {
		lane  int
		mx    float64
		text  string
		write bool // a write's outcome: its label goes first
	}
	var cs []cand
	for li, l := range lanes {
		n := 0
		for _, m := range l.Marks {
			if m.Label != "" {
				n++
			}
		}
		if n > maxMarkLabel {
			continue // too many to label: the shapes keep them as tooltips
		}
		for _, m := range l.Marks {
			if m.Label != "" {
				w := m.Kind == Accepted || m.Kind == Rejected || m.Kind == Stale
				cs = append(cs, cand{li, x(m.At), m.Label, w})
			}
		}
	}
	// The writes' outcomes are what the picture is about: they are placed
	// first, then the other labels, each group left to right.
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].write != cs[j].write {
			return cs[i].write
		}
		return cs[i].mx < cs[j].mx
	})
	for _, c := range cs {
		ly := top + c.lane*svgLaneH
		w := markLabelWidth(c.text)
	search:
		for _, ty := range []int{ly + 10, ly + svgLaneH - 2} {
			for _, anchor := range []string{"middle", "start", "end"} {
				b := textBox(c.mx, float64(ty), w, 10, anchor)
				if free(b) {
					put(placed{box: b, kind: markLabel, lane: c.lane, x: c.mx, y: float64(ty), anchor: anchor, size: 10, text: c.text})
					break search
				}
			}
		}
	}
	return out
}

// roundPx rounds a coordinate for the SVG text.
func roundPx(v float64) float64 { return math.Round(v*10) / 10 }
