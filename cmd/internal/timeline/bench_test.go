package timeline

import (
	"fmt"
	"io"
	"testing"
	"time"
)

// A lost-updates chart: 8 lanes, 4000 holds and writes.
func BenchmarkWriteSVG(b *testing.B) {
	t0 := time.Now()
	tl := New("bench", t0)
	for i := 0; i < 4000; i++ {
		lane := fmt.Sprintf("worker %d", i%8)
		from := t0.Add(time.Duration(i) * 2 * time.Millisecond)
		tl.Span(lane, Hold, from, from.Add(2*time.Millisecond), fmt.Sprint(i))
		tl.Mark(lane, Accepted, from.Add(time.Millisecond), "")
	}
	b.ResetTimer()
	for b.Loop() {
		if err := WriteSVG(io.Discard, "bench", tl); err != nil {
			b.Fatal(err)
		}
	}
}
