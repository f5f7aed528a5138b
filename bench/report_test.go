package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestHeader(t *testing.T) {
	h := NewHeader("what", map[string]string{"x": "1"}, Flags{Runs: 3, Duration: 5 * time.Second, Warmup: time.Second})
	if got, want := h.Medians(), "Median of 3 runs of 5s (warm-up 1s)."; got != want {
		t.Errorf("Medians()=%q, want %q", got, want)
	}
	var b strings.Builder
	if err := WriteJSON(&b, struct {
		Header
		Scale int `json:"scale"`
	}{h, 10}); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"benchmark\": \"what\",\n  \"versions\": {\n    \"x\": \"1\"\n  },\n  \"runs\": 3,\n  \"duration\": \"5s\",\n  \"warmup\": \"1s\",\n  \"scale\": 10\n}\n"
	if b.String() != want {
		t.Errorf("WriteJSON wrote\n%s\nwant\n%s", b.String(), want)
	}
	var back map[string]any
	if err := json.Unmarshal([]byte(b.String()), &back); err != nil {
		t.Fatal(err)
	}
}

func TestFormatMicrosAndShare(t *testing.T) {
	for _, c := range []struct {
		d        time.Duration
		decimals int
		want     string
	}{{0, 1, "-"}, {-time.Microsecond, 0, "-"}, {1500 * time.Nanosecond, 1, "1.5"}, {1500 * time.Nanosecond, 0, "2"}, {27 * time.Microsecond, 1, "27.0"}} {
		if got := FormatMicros(c.d, c.decimals); got != c.want {
			t.Errorf("FormatMicros(%v, %d)=%q, want %q", c.d, c.decimals, got, c.want)
		}
	}
	if got := FormatShare(0.024); got != "2%" {
		t.Errorf("FormatShare(0.024)=%q, want 2%%", got)
	}
}
