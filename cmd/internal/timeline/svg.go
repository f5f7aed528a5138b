package timeline

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"time"
)

// SVG layout, in pixels.
const (
	svgWidth     = 1000
	svgLeft      = 130 // lane names
	svgRight     = 40
	svgLaneH     = 46
	svgTitleH    = 44
	svgAxisH     = 34
	svgPanelGap  = 18
	svgLegendH   = 56
	maxMarkLabel = 12 // lanes with more marks than this draw them smaller and unlabelled
)

// Colours of the picture.
const (
	colHold     = "#4c78a8"
	colLease    = "#b8c4ce"
	colPause    = "#e45756"
	colAccepted = "#2e9e44"
	colRejected = "#d62728"
	colStale    = "#f58518"
	colExpiry   = "#7f7f7f"
	colNote     = "#555555"
)

// WriteSVG draws the timelines one above the other on a shared time axis and
// a legend at the bottom, as a standalone SVG document.
func WriteSVG(w io.Writer, title string, ts ...*Timeline) error {
	bw := bufio.NewWriter(w)
	var span time.Duration
	height := svgTitleH + svgLegendH
	snaps := make([][]Lane, len(ts))
	for i, t := range ts {
		if d := t.Duration(); d > span {
			span = d
		}
		snaps[i] = t.Lanes()
		height += svgTitleH + len(snaps[i])*svgLaneH + svgAxisH + svgPanelGap
	}
	if span <= 0 {
		span = time.Second
	}
	span = span + span/50 // a little room on the right
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(d time.Duration) float64 { return svgLeft + plotW*float64(d)/float64(span) }

	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n",
		svgWidth, height, svgWidth, height)
	p(`<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
		`<rect width="6" height="6" fill="#fde0dd"/><line x1="0" y1="0" x2="0" y2="6" stroke="` + colPause + `" stroke-width="2"/></pattern></defs>` + "\n")
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="28" font-size="20" font-weight="bold">%s</text>`+"\n", 16, esc(title))

	y := svgTitleH
	for i, t := range ts {
		lanes := snaps[i]
		p(`<text x="16" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", y+18, esc(t.Title()))
		if c := t.Caption(); c != "" {
			p(`<text x="16" y="%d" font-size="13" fill="#333">%s</text>`+"\n", y+36, esc(c))
		}
		y += svgTitleH
		top := y
		labels := layout(lanes, top, x)
		for li, l := range lanes {
			ly := y + li*svgLaneH
			if li%2 == 0 {
				p(`<rect x="%d" y="%d" width="%d" height="%d" fill="#f6f7f9"/>`+"\n", svgLeft, ly, svgWidth-svgLeft-svgRight, svgLaneH)
			}
			p(`<text x="%d" y="%d" font-size="13" text-anchor="end">%s</text>`+"\n", svgLeft-10, ly+svgLaneH/2+4, esc(l.Name))
			drawLane(p, l, li, ly, x, labels)
		}
		y += len(lanes) * svgLaneH
		drawAxis(p, top, y, span, x)
		y += svgAxisH + svgPanelGap
	}
	drawLegend(p, y, usedIn(snaps...))
	p("</svg>\n")
	return bw.Flush()
}

func drawLane(p func(string, ...any), l Lane, li int, ly int, x func(time.Duration) float64, labels []placed) {
	for _, s := range l.Spans {
		x0, x1 := x(s.Start), x(s.End)
		w := math.Max(x1-x0, 1.5)
		switch s.Kind {
		case Lease:
			p(`<rect x="%.1f" y="%d" width="%.1f" height="5" fill="%s"><title>%s</title></rect>`+"\n", x0, ly+34, w, colLease, esc(tip(s.Kind.String(), s.Label)))
		case Hold:
			p(`<rect x="%.1f" y="%d" width="%.1f" height="16" rx="2" fill="%s" fill-opacity="0.85"><title>%s</title></rect>`+"\n",
				x0, ly+15, w, colHold, esc(tip(s.Kind.String(), s.Label)))
		}
	}
	// Pauses go over the holds: the client still believes it holds the lock.
	for _, s := range l.Spans {
		if s.Kind != Pause {
			continue
		}
		x0, x1 := x(s.Start), x(s.End)
		w := math.Max(x1-x0, 1.5)
		p(`<rect x="%.1f" y="%d" width="%.1f" height="26" fill="url(#hatch)" fill-opacity="0.8" stroke="%s" stroke-width="1"><title>%s</title></rect>`+"\n",
			x0, ly+11, w, colPause, esc(tip(s.Kind.String(), s.Label)))
	}
	// Pause and token labels go over the bars, where layout put them.
	for _, pl := range labels {
		if pl.lane != li {
			continue
		}
		switch pl.kind {
		case pauseLabel:
			p(`<text x="%.1f" y="%.0f" font-size="11" font-weight="bold" fill="#8b1a1a" text-anchor="middle" %s>%s</text>`+"\n", roundPx(pl.x), pl.y, halo, esc(pl.text))
		case tokenLabel:
			p(`<text x="%.1f" y="%.0f" font-size="11" font-weight="bold" fill="#17324d" %s>%s</text>`+"\n", roundPx(pl.x), pl.y, halo, esc(pl.text))
		}
	}
	crowded := len(l.Marks) > maxMarkLabel
	for _, m := range l.Marks {
		mx := x(m.At)
		cy := markY(ly)
		t := esc(tip(m.Kind.String(), m.Label))
		switch m.Kind {
		case Accepted:
			r := 5.0
			if crowded {
				r = 3
			}
			p(`<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" stroke="white" stroke-width="1"><title>%s</title></circle>`+"\n", mx, cy, r, colAccepted, t)
		case Rejected:
			p(`<g stroke="%s" stroke-width="3"><title>%s</title><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/></g>`+"\n",
				colRejected, t, mx-6, cy-6, mx+6, cy+6, mx-6, cy+6, mx+6, cy-6)
		case Stale:
			p(`<path d="M%.1f %.1f L%.1f %.1f L%.1f %.1f Z" fill="%s" stroke="#7a3e00" stroke-width="1"><title>%s</title></path>`+"\n",
				mx, cy-8, mx+7, cy+6, mx-7, cy+6, colStale, t)
		case Expiry:
			p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="4 3"><title>%s</title></line>`+"\n",
				mx, ly+2, mx, ly+svgLaneH-2, colExpiry, t)
		case Note:
			p(`<path d="M%.1f %.1f L%.1f %.1f L%.1f %.1f L%.1f %.1f Z" fill="%s"><title>%s</title></path>`+"\n",
				mx, cy-5, mx+5, cy, mx, cy+5, mx-5, cy, colNote, t)
		}
	}
	for _, pl := range labels {
		if pl.lane == li && pl.kind == markLabel {
			p(`<text x="%.1f" y="%.0f" font-size="10" fill="#222" text-anchor="%s" %s>%s</text>`+"\n", roundPx(pl.x), pl.y, pl.anchor, halo, esc(pl.text))
		}
	}
}

func drawAxis(p func(string, ...any), top, bottom int, span time.Duration, x func(time.Duration) float64) {
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", svgLeft, bottom, svgWidth-svgRight, bottom)
	step := tickStep(span)
	for d := time.Duration(0); d <= span; d += step {
		tx := x(d)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", tx, top, tx, bottom)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", tx, bottom, tx, bottom+5)
		p(`<text x="%.1f" y="%d" font-size="11" text-anchor="middle" fill="#333">%s</text>`+"\n", tx, bottom+18, fmtOffset(d))
	}
}

// drawLegend explains the shapes the picture draws, and only those.
func drawLegend(p func(string, ...any), y int, u used) {
	y += 8
	p(`<g font-size="12" fill="#222">` + "\n")
	all := []struct {
		show  bool
		shape string
		text  string
	}{
		{u.spans[Hold], fmt.Sprintf(`<rect x="0" y="-10" width="26" height="12" rx="2" fill="%s"/>`, colHold), "believes it holds the lock (token)"},
		{u.spans[Lease], fmt.Sprintf(`<rect x="0" y="-3" width="26" height="5" fill="%s"/>`, colLease), "lease in Redis"},
		{u.spans[Pause], fmt.Sprintf(`<rect x="0" y="-11" width="26" height="14" fill="url(#hatch)" stroke="%s"/>`, colPause), "process paused (SIGSTOP)"},
		{u.marks[Expiry], fmt.Sprintf(`<line x1="13" y1="-12" x2="13" y2="4" stroke="%s" stroke-width="1.5" stroke-dasharray="4 3"/>`, colExpiry), "TTL expired"},
		{u.marks[Accepted], fmt.Sprintf(`<circle cx="13" cy="-4" r="5" fill="%s"/>`, colAccepted), "write accepted"},
		{u.marks[Rejected], fmt.Sprintf(`<g stroke="%s" stroke-width="3"><line x1="7" y1="-10" x2="19" y2="2"/><line x1="7" y1="2" x2="19" y2="-10"/></g>`, colRejected), "write rejected by the fence"},
		{u.marks[Stale], fmt.Sprintf(`<path d="M13 -12 L20 2 L6 2 Z" fill="%s"/>`, colStale), "stale write landed"},
	}
	type item struct{ shape, text string }
	var items []item
	for _, it := range all {
		if it.show {
			items = append(items, item{it.shape, it.text})
		}
	}
	cols := 4
	for i, it := range items {
		gx := 16 + (i%cols)*245
		gy := y + 14 + (i/cols)*22
		p(`<g transform="translate(%d,%d)">%s<text x="34" y="0">%s</text></g>`+"\n", gx, gy, it.shape, esc(it.text))
	}
	p("</g>\n")
}

// tickStep picks 1, 2 or 5 times a power of ten so that span has 5-12 ticks.
func tickStep(span time.Duration) time.Duration { return tickStepMax(span, 12) }

// tickStepMax picks the smallest 1, 2 or 5 times a power of ten that gives
// span at most maxTicks ticks.
func tickStepMax(span time.Duration, maxTicks int) time.Duration {
	maxTicks = max(maxTicks, 1)
	for base := time.Millisecond; ; base *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if s := base * m; int(span/s) <= maxTicks {
				return s
			}
		}
	}
}

func fmtOffset(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.Seconds()
	switch {
	case d%time.Second == 0:
		return fmt.Sprintf("%.0fs", s)
	case d%(100*time.Millisecond) == 0:
		return fmt.Sprintf("%.1fs", s)
	case d%(10*time.Millisecond) == 0:
		return fmt.Sprintf("%.2fs", s)
	}
	return fmt.Sprintf("%.3fs", s)
}

// halo outlines text in white so it stays readable over bars and hatching.
const halo = `stroke="white" stroke-width="3" paint-order="stroke"`

func tip(kind, label string) string {
	if label == "" {
		return kind
	}
	return kind + ": " + label
}

func esc(s string) string { return html.EscapeString(s) }
