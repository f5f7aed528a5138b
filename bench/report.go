package bench

import (
	"fmt"
	"time"
)

// Header opens every report: what was measured, the versions of the
// programs involved, and how (the Flags). Embedded in a report struct, its
// fields come first in the JSON.
type Header struct {
	Benchmark string            `json:"benchmark"`
	Versions  map[string]string `json:"versions"`
	Runs      int               `json:"runs"`
	Duration  string            `json:"duration"`
	Warmup    string            `json:"warmup"`
}

// NewHeader describes a benchmark run with the flags f.
func NewHeader(benchmark string, versions map[string]string, f Flags) Header {
	return Header{Benchmark: benchmark, Versions: versions, Runs: f.Runs,
		Duration: f.Duration.String(), Warmup: f.Warmup.String()}
}

// Medians says what a report's figures are: "Median of 3 runs of 5s
// (warm-up 1s)."
func (h Header) Medians() string {
	return fmt.Sprintf("Median of %d runs of %s (warm-up %s).", h.Runs, h.Duration, h.Warmup)
}

// FormatMicros prints d in microseconds with the given decimals, or "-"
// when there is no figure (d <= 0).
func FormatMicros(d time.Duration, decimals int) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, float64(d)/float64(time.Microsecond))
}

// FormatShare prints a fraction as a percentage with no decimals: "12%".
func FormatShare(f float64) string {
	return fmt.Sprintf("%.0f%%", 100*f)
}
