package bench

import (
	"math"
	"slices"
	"time"
)

// Median returns the median of xs: the middle value, or the mean of the two
// middle values for an even count. It returns 0 for no values and does not
// modify xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MedianDuration is Median for durations.
func MedianDuration(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(math.Round(Median(xs)))
}

// Field returns f of every run, in order: the figures a column of a result
// table takes the median of, or lists run by run.
func Field[R, T any](runs []R, f func(R) T) []T {
	out := make([]T, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted, by the
// nearest-rank method: the smallest sample such that at least p percent of
// the samples are less than or equal to it. It returns 0 for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// Result is what one measured run of a closed-loop load produced.
type Result struct {
	Ops     int           `json:"ops"`
	Errors  int           `json:"errors"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// PerSec is Ops divided by Elapsed.
	PerSec float64       `json:"per_sec"`
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	Mean   time.Duration `json:"mean_ns"`
}

// Summarize computes a Result from the latencies of the successful
// operations of a run that lasted elapsed. It sorts lats in place.
func Summarize(lats []time.Duration, errors int, elapsed time.Duration) Result {
	slices.Sort(lats)
	r := Result{Ops: len(lats), Errors: errors, Elapsed: elapsed}
	if elapsed > 0 {
		r.PerSec = float64(len(lats)) / elapsed.Seconds()
	}
	if len(lats) > 0 {
		var sum time.Duration
		for _, d := range lats {
			sum += d
		}
		r.Mean = sum / time.Duration(len(lats))
		r.P50 = Percentile(lats, 50)
		r.P99 = Percentile(lats, 99)
	}
	return r
}

// MedianResult returns a Result whose every figure is the median of that
// figure over runs (so the medians may come from different runs).
func MedianResult(runs []Result) Result {
	var ops, errs, per []float64
	var el, p50, p99, mean []time.Duration
	for _, r := range runs {
		ops = append(ops, float64(r.Ops))
		errs = append(errs, float64(r.Errors))
		per = append(per, r.PerSec)
		el = append(el, r.Elapsed)
		p50 = append(p50, r.P50)
		p99 = append(p99, r.P99)
		mean = append(mean, r.Mean)
	}
	return Result{
		Ops:     int(math.Round(Median(ops))),
		Errors:  int(math.Round(Median(errs))),
		Elapsed: MedianDuration(el),
		PerSec:  Median(per),
		P50:     MedianDuration(p50),
		P99:     MedianDuration(p99),
		Mean:    MedianDuration(mean),
	}
}

// Ratio returns a/b, or NaN when b is zero (shown as "-" by FormatRatio).
func Ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// FormatRatio prints a ratio with two decimals and an "x", or "-" for NaN.
func FormatRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "-"
	}
	return formatFloat(r, 2) + "x"
}

// FormatRate prints an operations-per-second figure with no decimals and
// thousands separators (12,345).
func FormatRate(x float64) string {
	return groupThousands(int64(math.Round(x)))
}

// FormatMillis prints a duration in milliseconds with enough decimals to be
// read at a glance (2.51, 0.318).
func FormatMillis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return formatFloat(ms, 0)
	case ms >= 10:
		return formatFloat(ms, 1)
	case ms >= 1:
		return formatFloat(ms, 2)
	default:
		return formatFloat(ms, 3)
	}
}
