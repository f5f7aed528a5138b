package relay

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are a relay's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	delivered, retried, failed *prometheus.CounterVec
	latency                    *prometheus.HistogramVec
	pending, failing, oldest   prometheus.Gauge
}

// NewMetrics registers the relay's metrics with reg:
//
//	fencegate_relay_delivered_total{target}   effects delivered (2xx)
//	fencegate_relay_retried_total{target}     attempts to be retried (connection error, timeout, 408, 429, 5xx)
//	fencegate_relay_failed_total{target}      effects failed (other answers, or out of attempts)
//	fencegate_relay_delivery_seconds{target}  from the effect's transaction to its delivery
//	fencegate_relay_pending                   effects pending in the database (all targets)
//	fencegate_relay_failed                    effects failed in the database, waiting for an operator
//	fencegate_relay_oldest_pending_seconds    age of the oldest pending effect (0: none)
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_relay_delivered_total", Help: "Effects delivered (the target answered 2xx)."}, []string{"target"}),
		retried:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_relay_retried_total", Help: "Attempts that will be retried (connection error, timeout, 408, 429, 5xx)."}, []string{"target"}),
		failed:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fencegate_relay_failed_total", Help: "Effects failed (another answer, or out of attempts); kept for an operator."}, []string{"target"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fencegate_relay_delivery_seconds", Help: "From the start of the effect's transaction to its delivery.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"target"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_relay_pending", Help: "Effects pending in the database, all targets."}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_relay_failed", Help: "Effects failed in the database, waiting for an operator."}),
		oldest:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencegate_relay_oldest_pending_seconds", Help: "Age of the oldest pending effect; 0 when none is pending."}),
	}
	reg.MustRegister(m.delivered, m.retried, m.failed, m.latency, m.pending, m.failing, m.oldest)
	return m
}

func (m *Metrics) settled(e effect, o outcome) {
	if m == nil {
		return
	}
	switch o.kind {
	case "delivered":
		m.delivered.WithLabelValues(e.target).Inc()
		m.latency.WithLabelValues(e.target).Observe(time.Since(e.created).Seconds())
	case "retry":
		m.retried.WithLabelValues(e.target).Inc()
	default:
		m.failed.WithLabelValues(e.target).Inc()
	}
}

func (m *Metrics) stats(pending, failed int64, oldest *time.Time) {
	if m == nil {
		return
	}
	m.pending.Set(float64(pending))
	m.failing.Set(float64(failed))
	if oldest == nil {
		m.oldest.Set(0)
	} else {
		m.oldest.Set(time.Since(*oldest).Seconds())
	}
}

// Handler serves /metrics from gather and /healthz: 200 while the relay
// reaches its database, 503 otherwise.
func (r *Relay) Handler(gather prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Healthy() {
			http.Error(w, "relay: database not reached lately", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n")) //nolint:errcheck
	})
	return mux
}
