package timeline

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

func sample() *Timeline {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tl := New("paused holder", t0)
	tl.AddLane("client 1", "client 2", "PostgreSQL")
	tl.Span("client 1", Hold, at(0), at(2600), "token 33")
	tl.Span("client 1", Lease, at(0), at(1000), "")
	tl.Mark("client 1", Expiry, at(1000), "TTL expired")
	tl.Span("client 1", Pause, at(100), at(2400), "paused")
	tl.Span("client 2", Hold, at(1200), at(1800), "token 34")
	tl.Mark("client 2", Accepted, at(1500), "token 34 accepted")
	tl.Mark("client 1", Rejected, at(2500), "token 33 rejected: FG001")
	tl.SetCaption("stale write rejected")
	return tl
}

func TestSVGIsWellFormed(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, "demo <&>", sample(), sample()); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&buf)
	var elems int
	texts := map[string]bool{}
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			elems++
			inText = v.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts[string(v)] = true
			}
		case xml.EndElement:
			inText = false
		}
	}
	for _, want := range []string{"demo <&>", "token 33", "token 34", "client 1", "write rejected by the fence", "TTL expired"} {
		if !texts[want] {
			t.Errorf("SVG has no text %q", want)
		}
	}
}

func TestTextRendering(t *testing.T) {
	var buf bytes.Buffer
	if err := sample().WriteText(&buf, 60, 0, true); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(out, "\n")
	var c1 string
	for _, l := range lines {
		if strings.HasPrefix(l, "client 1") {
			c1 = l
			break
		}
	}
	for _, ch := range []string{"=", "z", "|", "X"} {
		if !strings.Contains(c1, ch) {
			t.Errorf("client 1 row %q lacks %q", c1, ch)
		}
	}
	if strings.Index(out, "token 34 accepted") > strings.Index(out, "token 33 rejected") {
		t.Errorf("events not in time order:\n%s", out)
	}
}

func TestTickStep(t *testing.T) {
	for _, tc := range []struct {
		span time.Duration
		want time.Duration
	}{
		{3 * time.Second, 500 * time.Millisecond},
		{10 * time.Second, time.Second},
		{40 * time.Millisecond, 5 * time.Millisecond},
	} {
		if got := tickStep(tc.span); got != tc.want {
			t.Errorf("tickStep(%v)=%v, want %v", tc.span, got, tc.want)
		}
	}
}

// The legends list what the picture draws and nothing else.
func TestLegendListsOnlyWhatAppears(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tl := New("no pause", t0)
	tl.AddLane("client 1")
	tl.Span("client 1", Hold, t0, t0.Add(time.Second), "token 7")
	tl.Mark("client 1", Accepted, t0.Add(500*time.Millisecond), "token 7 accepted")
	var svg, text bytes.Buffer
	if err := WriteSVG(&svg, "x", tl); err != nil {
		t.Fatal(err)
	}
	if err := tl.WriteText(&text, 60, 0, false); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{svg.String(), text.String()} {
		for _, want := range []string{"holds", "write accepted"} {
			if !strings.Contains(out, want) {
				t.Errorf("legend lacks %q:\n%s", want, out)
			}
		}
		for _, absent := range []string{"paused", "SIGSTOP", "TTL expired", "rejected", "stale write", "lease in Redis"} {
			if strings.Contains(out, absent) {
				t.Errorf("legend lists %q, which the picture does not draw", absent)
			}
		}
	}
	// The full sample draws every kind but the stale write.
	text.Reset()
	if err := sample().WriteText(&text, 60, 0, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "z paused") || strings.Contains(text.String(), "! stale write landed") {
		t.Errorf("sample legend:\n%s", text.String())
	}
}

// No two mark labels overlap, however close their marks are: crowded ones
// go to the other row or, when both rows are taken there, stay tooltips.
func TestMarkLabelsDoNotOverlap(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tl := New("crowded", t0)
	tl.AddLane("client 1")
	tl.Span("client 1", Hold, t0, t0.Add(3*time.Second), "token 9")
	for i, ms := range []int{0, 5, 10, 1000, 1010, 1020, 1030, 1250, 2990, 3000} {
		tl.Mark("client 1", Note, t0.Add(time.Duration(ms)*time.Millisecond), strings.Repeat("label ", 1+i%3)+"end")
	}
	placed := checkLayout(t, tl)
	marks := 0
	for _, p := range placed {
		if p.kind == markLabel {
			marks++
		}
	}
	if marks < 4 {
		t.Fatalf("only %d of 10 labels drawn", marks)
	}
}
