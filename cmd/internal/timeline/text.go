package timeline

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"
)

// Characters of the text rendering.
const (
	chHold     = '='
	chLease    = '-'
	chPause    = 'z'
	chAccepted = '+'
	chRejected = 'X'
	chStale    = '!'
	chExpiry   = '|'
	chNote     = '*'
)

// TextLegend explains every character WriteText may use; a picture's own
// legend lists only those it draws.
const TextLegend = "= holds lock   - lease in Redis   z paused   | TTL expired   + write accepted   X write rejected   ! stale write landed   * event"

// WriteText draws the timeline as rows of width characters, one per lane, on
// the axis [0, span) (span <= 0 means the timeline's own duration), followed,
// when events is true, by the labelled spans and marks in time order.
func (t *Timeline) WriteText(w io.Writer, width int, span time.Duration, events bool) error {
	bw := bufio.NewWriter(w)
	if width < 20 {
		width = 20
	}
	if span <= 0 {
		span = t.Duration()
	}
	if span <= 0 {
		span = time.Second
	}
	span += span / 50
	lanes := t.Lanes()
	nameW := 6
	for _, l := range lanes {
		nameW = max(nameW, len(l.Name))
	}
	col := func(d time.Duration) int {
		c := int(int64(width) * int64(d) / int64(span))
		return min(max(c, 0), width-1)
	}
	fmt.Fprintf(bw, "%s\n", t.Title())
	if c := t.Caption(); c != "" {
		fmt.Fprintf(bw, "%s\n", c)
	}
	// Axis labels: the tick value printed at its column.
	axis := []byte(strings.Repeat(" ", width+12))
	step := tickStepMax(span, width/7)
	for d := time.Duration(0); d < span; d += step {
		lbl := fmtOffset(d)
		c := col(d)
		if c+len(lbl) <= len(axis) && (c == 0 || axis[c-1] == ' ') {
			copy(axis[c:], lbl)
		}
	}
	fmt.Fprintf(bw, "%-*s  %s\n", nameW, "", strings.TrimRight(string(axis), " "))
	for _, l := range lanes {
		row := []rune(strings.Repeat(" ", width))
		paint := func(s Span, ch rune) {
			for c := col(s.Start); c <= col(s.End); c++ {
				row[c] = ch
			}
		}
		for _, s := range l.Spans {
			if s.Kind == Lease {
				paint(s, chLease)
			}
		}
		for _, s := range l.Spans {
			if s.Kind == Hold {
				paint(s, chHold)
			}
		}
		for _, s := range l.Spans {
			if s.Kind == Pause {
				paint(s, chPause)
			}
		}
		for _, m := range l.Marks {
			row[col(m.At)] = markRune(m.Kind)
		}
		fmt.Fprintf(bw, "%-*s  %s\n", nameW, l.Name, strings.TrimRight(string(row), " "))
	}
	fmt.Fprintf(bw, "%-*s  %s\n", nameW, "", textLegend(lanes))
	if events {
		fmt.Fprintln(bw)
		for _, e := range t.Events() {
			when := fmt.Sprintf("%7.3fs", e.At.Seconds())
			what := e.Label
			if e.End > e.At {
				what += fmt.Sprintf(" (%.3fs)", (e.End - e.At).Seconds())
			}
			fmt.Fprintf(bw, "  %s  %-*s  %-18s  %s\n", when, nameW, e.Lane, e.What, what)
		}
	}
	return bw.Flush()
}

func markRune(k MarkKind) rune {
	switch k {
	case Accepted:
		return chAccepted
	case Rejected:
		return chRejected
	case Stale:
		return chStale
	case Expiry:
		return chExpiry
	}
	return chNote
}
