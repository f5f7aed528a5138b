package proxy_test

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func testutilCounter(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var d dto.Metric
		_ = m.Write(&d)
		if d.Counter != nil {
			sum += d.Counter.GetValue()
		}
		if d.Gauge != nil {
			sum += d.Gauge.GetValue()
		}
	}
	return sum
}
