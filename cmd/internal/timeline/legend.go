package timeline

import "strings"

// used records which kinds of spans and marks a picture draws, so that its
// legend explains those and nothing else.
type used struct {
	spans map[SpanKind]bool
	marks map[MarkKind]bool
}

func usedIn(lanes ...[]Lane) used {
	u := used{spans: map[SpanKind]bool{}, marks: map[MarkKind]bool{}}
	for _, ls := range lanes {
		for _, l := range ls {
			for _, s := range l.Spans {
				u.spans[s.Kind] = true
			}
			for _, m := range l.Marks {
				u.marks[m.Kind] = true
			}
		}
	}
	return u
}

// textLegend is the legend of WriteText for what the lanes draw: the
// entries of TextLegend whose kind appears, in TextLegend's order.
func textLegend(lanes []Lane) string {
	u := usedIn(lanes)
	entries := []struct {
		show bool
		text string
	}{
		{u.spans[Hold], "= holds lock"},
		{u.spans[Lease], "- lease in Redis"},
		{u.spans[Pause], "z paused"},
		{u.marks[Expiry], "| TTL expired"},
		{u.marks[Accepted], "+ write accepted"},
		{u.marks[Rejected], "X write rejected"},
		{u.marks[Stale], "! stale write landed"},
		{u.marks[Note], "* event"},
	}
	var parts []string
	for _, e := range entries {
		if e.show {
			parts = append(parts, e.text)
		}
	}
	return strings.Join(parts, "   ")
}
