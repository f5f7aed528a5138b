package proxy

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus collectors.
type Metrics struct {
	// Connections is the number of open client sessions.
	Connections prometheus.Gauge
	// ConnectionsTotal counts accepted client connections.
	ConnectionsTotal prometheus.Counter
	// FencesAccepted counts fence calls that returned a token.
	FencesAccepted prometheus.Counter
	// Rejections counts ErrorResponses with a fencegate SQLSTATE, by code.
	Rejections *prometheus.CounterVec
	// ProtocolErrors counts connections closed for a protocol violation.
	ProtocolErrors prometheus.Counter
	// FenceSeconds observes the time from forwarding a fence call until
	// its answer, which includes waiting for the row lock of the mark.
	FenceSeconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_proxy_connections", Help: "Open client sessions.",
		}),
		ConnectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_proxy_connections_total", Help: "Client connections accepted.",
		}),
		FencesAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_proxy_fences_accepted_total", Help: "Fence calls that accepted their token.",
		}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_proxy_rejections_total", Help: "Errors with a fencegate SQLSTATE sent to clients, by SQLSTATE.",
		}, []string{"sqlstate"}),
		ProtocolErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_proxy_protocol_errors_total", Help: "Client connections closed for a protocol violation.",
		}),
		FenceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencegate_proxy_fence_seconds",
			Help:    "Time from forwarding a fence call to its answer, including waiting for the mark's row lock.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
	}
	for _, code := range []string{CodeStaleToken, CodeUnfenced, CodeMisuse} {
		m.Rejections.WithLabelValues(code)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.Connections, m.ConnectionsTotal, m.FencesAccepted, m.Rejections, m.ProtocolErrors, m.FenceSeconds} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("register proxy metrics: %w (use one registry per proxy)", err)
			}
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return m, nil
}
