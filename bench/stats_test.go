package bench

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tc.in...)
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v)=%v, want %v", in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Fatalf("Median modified its input: %v, was %v", tc.in, in)
			}
		}
	}
}

func TestPercentile(t *testing.T) {
	var lats []time.Duration
	for i := 1; i <= 100; i++ {
		lats = append(lats, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := Percentile(lats, tc.p); got != tc.want {
			t.Errorf("Percentile(1..100ms, %v)=%v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil)=%v, want 0", got)
	}
	if got, want := Percentile([]time.Duration{7}, 99), time.Duration(7); got != want {
		t.Errorf("Percentile([7], 99)=%v, want %v", got, want)
	}
}

func TestSummarize(t *testing.T) {
	lats := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	r := Summarize(lats, 1, 2*time.Second)
	if r.Ops != 4 || r.Errors != 1 {
		t.Fatalf("Summarize ops/errors = %d/%d, want 4/1", r.Ops, r.Errors)
	}
	if got, want := r.PerSec, 2.0; got != want {
		t.Errorf("PerSec=%v, want %v", got, want)
	}
	if got, want := r.P50, 2*time.Millisecond; got != want {
		t.Errorf("P50=%v, want %v", got, want)
	}
	if got, want := r.P99, 4*time.Millisecond; got != want {
		t.Errorf("P99=%v, want %v", got, want)
	}
	if got, want := r.Mean, 2500*time.Microsecond; got != want {
		t.Errorf("Mean=%v, want %v", got, want)
	}
}

func TestMedianResult(t *testing.T) {
	runs := []Result{
		{Ops: 10, PerSec: 100, P50: 3 * time.Millisecond, P99: 9 * time.Millisecond},
		{Ops: 30, PerSec: 300, P50: 1 * time.Millisecond, P99: 7 * time.Millisecond},
		{Ops: 20, PerSec: 200, P50: 2 * time.Millisecond, P99: 8 * time.Millisecond},
	}
	m := MedianResult(runs)
	if m.Ops != 20 || m.PerSec != 200 || m.P50 != 2*time.Millisecond || m.P99 != 8*time.Millisecond {
		t.Errorf("MedianResult=%+v, want ops 20, 200/s, p50 2ms, p99 8ms", m)
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{FormatRatio(Ratio(3, 2)), "1.50x"},
		{FormatRatio(Ratio(1, 0)), "-"},
		{FormatRatio(math.NaN()), "-"},
		{FormatRate(352.4), "352"},
		{FormatRate(3770), "3,770"},
		{FormatRate(1234567.8), "1,234,568"},
		{FormatRate(-1234), "-1,234"},
		{FormatMillis(2500 * time.Microsecond), "2.50"},
		{FormatMillis(15 * time.Millisecond), "15.0"},
		{FormatMillis(318 * time.Microsecond), "0.318"},
		{FormatMillis(1234 * time.Millisecond), "1234"},
		{JoinRates([]float64{352, 3770}), "352 / 3,770"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestField(t *testing.T) {
	runs := []Result{{PerSec: 3}, {PerSec: 1}, {PerSec: 2}}
	if got := Field(runs, func(r Result) float64 { return r.PerSec }); !slices.Equal(got, []float64{3, 1, 2}) || Median(got) != 2 {
		t.Errorf("Field=%v, want [3 1 2] with median 2", got)
	}
}
