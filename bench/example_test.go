package bench_test

import (
	"fmt"
	"os"
	"time"

	"github.com/fencegate/fencegate/bench"
)

func ExampleTable() {
	t := bench.NewTable("clients", "system", "tokens/s", "p50 ms").Labels(2)
	t.Row("64", "fencegate", bench.FormatRate(41234), bench.FormatMillis(1500*time.Microsecond))
	t.Row("64", "etcd", bench.FormatRate(3770), bench.FormatMillis(15*time.Millisecond))
	t.Row("64", "fencegate/etcd", bench.FormatRatio(bench.Ratio(41234, 3770)), bench.FormatRatio(0.1))
	t.WriteTo(os.Stdout)
	// Output:
	// clients  system          tokens/s  p50 ms
	// -----------------------------------------
	// 64       fencegate         41,234    1.50
	// 64       etcd               3,770    15.0
	// 64       fencegate/etcd    10.94x   0.10x
}

func ExampleMedianResult() {
	runs := []bench.Result{
		bench.Summarize([]time.Duration{2 * time.Millisecond, 3 * time.Millisecond}, 0, time.Second),
		bench.Summarize([]time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}, 0, time.Second),
		bench.Summarize([]time.Duration{4 * time.Millisecond}, 0, time.Second),
	}
	m := bench.MedianResult(runs)
	fmt.Println(m.PerSec, m.P50)
	// Output: 2 2ms
}
