package proxy

import (
	"errors"
	"fmt"
	"sync"

	"github.com/fencegate/fencegate"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus collectors.
type Metrics struct {
	// Connections is the number of open client sessions.
	Connections prometheus.Gauge
	// ConnectionsTotal counts accepted client connections.
	ConnectionsTotal prometheus.Counter
	// SessionsRefused counts sessions the gate refused at startup, by
	// reason: privileged_role (FG007), schema (FG005: missing, altered or
	// not repairable), server_version (FG005: a PostgreSQL major fencegate
	// does not support) or check_failed (the check itself failed).
	SessionsRefused *prometheus.CounterVec
	// SchemaRepairs counts schema installs and repairs made through
	// Config.AdminUpstream, by database.
	SchemaRepairs *prometheus.CounterVec
	// SessionsReaped counts sessions straight to PostgreSQL that the
	// reaper (Config.ReapUpstream) ended for holding a fence past
	// Config.ReapAfter.
	SessionsReaped prometheus.Counter
	// FencesAccepted counts fence calls that returned their token to the
	// client, as the proxy recognizes them: see DESIGN.md for what it
	// counts and what it misses.
	FencesAccepted prometheus.Counter
	// Rejections counts ErrorResponses with a fencegate SQLSTATE sent to
	// clients, by SQLSTATE and table: FG002 names the protected table
	// written; FG001 and the others carry no table ("").
	Rejections *prometheus.CounterVec
	// ProtocolErrors counts connections closed for a protocol violation.
	ProtocolErrors prometheus.Counter
	// FenceSeconds observes the time from forwarding a recognized fence
	// call until its answer, which includes waiting for the mark's row lock.
	FenceSeconds prometheus.Histogram
	// GateSeconds observes the time the gate's check takes at startup.
	GateSeconds prometheus.Histogram
	// UpstreamHealthy is 1 when the last upstream check of the health
	// endpoint passed, else 0 (see Proxy.Health).
	UpstreamHealthy prometheus.Gauge
	// Prunes counts scheduled prunes (Config.PruneOlderThan), by database
	// and result (ok or error).
	Prunes *prometheus.CounterVec
	// MarksPruned counts the marks scheduled prunes deleted, by database.
	MarksPruned *prometheus.CounterVec
	// PruneFloor is the floor each database was pruned to last.
	PruneFloor *prometheus.GaugeVec

	mu     sync.Mutex
	tables map[string]struct{} // table labels in use
}

func newMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_proxy_connections", Help: "Open client sessions.",
		}),
		ConnectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_proxy_connections_total", Help: "Client connections accepted.",
		}),
		SessionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_proxy_sessions_refused_total",
			Help: "Sessions refused at startup by the gate, by reason (privileged_role, schema, server_version, check_failed).",
		}, []string{"reason"}),
		Prunes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_proxy_prunes_total", Help: "Scheduled prunes of the marks (--prune-older-than), by database and result (ok, error).",
		}, []string{"database", "result"}),
		MarksPruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_proxy_marks_pruned_total", Help: "Marks deleted by scheduled prunes, by database.",
		}, []string{"database"}),
		PruneFloor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencegate_proxy_prune_floor", Help: "The floor each database was last pruned to: fences with a token at or below it fail with FG001.",
		}, []string{"database"}),
		SchemaRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_proxy_schema_repairs_total",
			Help: "Installs and repairs of the fencegate schema through the admin connection, by database.",
		}, []string{"database"}),
		SessionsReaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_proxy_sessions_reaped_total", Help: "Sessions the reaper ended for holding a fence in a stalled transaction past the limit.",
		}),
		FencesAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_proxy_fences_accepted_total", Help: "Fence calls that returned their token (recognized by their result column).",
		}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_proxy_rejections_total",
			Help: "Errors with a fencegate SQLSTATE sent to clients, by SQLSTATE and table (FG002 names the protected table).",
		}, []string{"sqlstate", "table"}),
		ProtocolErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_proxy_protocol_errors_total", Help: "Client connections closed for a protocol violation.",
		}),
		FenceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencegate_proxy_fence_seconds",
			Help:    "Time from forwarding a recognized fence call to its answer, including waiting for the mark's row lock.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		GateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencegate_proxy_gate_seconds",
			Help:    "Time the startup check (role and schema) takes.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		UpstreamHealthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_proxy_upstream_healthy",
			Help: "1 when the last upstream check (login and schema with a health role, else reachability) passed, else 0.",
		}),
		tables: map[string]struct{}{},
	}
	for _, code := range []string{fencegate.CodeStaleToken, fencegate.CodeMisuse, fencegate.CodeFenceTimeout} {
		m.Rejections.WithLabelValues(code, "")
	}
	for _, r := range []string{"privileged_role", "schema", "server_version", "check_failed"} {
		m.SessionsRefused.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.Connections, m.ConnectionsTotal, m.SessionsRefused, m.SchemaRepairs, m.SessionsReaped, m.Prunes, m.MarksPruned, m.PruneFloor,
		m.FencesAccepted, m.Rejections, m.ProtocolErrors, m.FenceSeconds, m.GateSeconds, m.UpstreamHealthy} {
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

// reject counts one fencegate error sent to a client.
func (m *Metrics) reject(code, table string) {
	if table != "" {
		m.mu.Lock()
		if _, ok := m.tables[table]; !ok {
			if len(m.tables) >= maxTableLabels {
				table = "other"
			} else {
				m.tables[table] = struct{}{}
			}
		}
		m.mu.Unlock()
	}
	m.Rejections.WithLabelValues(code, table).Inc()
}
