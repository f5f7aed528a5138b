package tokenservice

import (
	"net/http"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are a node's Prometheus collectors, in a registry of the node's
// own (served at GET /metrics), so that several nodes can run in one
// process.
type metrics struct {
	reg        *prometheus.Registry
	handler    http.Handler
	reserved   prometheus.Counter
	minted     prometheus.Counter // deprecated alias of reserved
	entries    prometheus.Counter
	batch      prometheus.Histogram
	commit     prometheus.Histogram
	handedOut  prometheus.Counter
	fwdCalls   prometheus.Counter
	fwdBatch   prometheus.Histogram
	refusals   *prometheus.CounterVec
	promotions prometheus.Counter
}

// tokenBuckets are powers of two up to the largest forwarded allocation.
var tokenBuckets = prometheus.ExponentialBuckets(1, 2, 21)

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		reserved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_token_reserved_total",
			Help: "Tokens by which entries this node committed as leader advanced the counter: whole reserved ranges on the read-index path, batches on the commit path. Tokens handed out are fencegate_token_handed_out_total.",
		}),
		// The old name of reserved: it never counted tokens handed out.
		// It stays, with the same value, so that dashboards and alerts keep
		// working while they move to the new name.
		minted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_token_minted_total",
			Help: "Deprecated: use fencegate_token_reserved_total (same value) for the counter's advance, or fencegate_token_handed_out_total for tokens handed out; this name will be removed.",
		}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_token_entries_total", Help: "Allocation entries this node committed as leader.",
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencegate_token_entry_tokens", Help: "Tokens per allocation entry this node committed as leader (the group-commit batch size).",
			Buckets: tokenBuckets,
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencegate_token_commit_seconds", Help: "Time from proposing an allocation entry to its applied result, on the leader.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		handedOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_token_handed_out_total", Help: "Tokens this node returned to its callers (minted here or by the leader it forwarded to).",
		}),
		fwdCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_token_forwarded_total", Help: "Allocation calls this node forwarded to the leader.",
		}),
		fwdBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencegate_token_forwarded_tokens", Help: "Tokens per allocation call this node forwarded to the leader.",
			Buckets: tokenBuckets,
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_token_refused_total", Help: "Requests answered with an error, by the error's code.",
		}, []string{"reason"}),
		promotions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencegate_token_promotions_total", Help: "Non-voters this node promoted to voter as leader, once caught up.",
		}),
	}
	for _, code := range []string{tokenapi.CodeBadRequest, tokenapi.CodeUnauthenticated, tokenapi.CodeForbidden, tokenapi.CodeNotLeader, tokenapi.CodeNoQuorum, tokenapi.CodeUnavailable, tokenapi.CodeRefused, tokenapi.CodeInternal} {
		m.refusals.WithLabelValues(code)
	}
	// Raft's own view, read when scraped; zero until Raft runs.
	raftGauge := func(name, help string, f func(raftstore.Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if st := s.Store(); st != nil {
				return f(st.Status())
			}
			return 0
		})
	}
	// Counters of the read-index path, read when scraped; 0 with
	// Config.CommitPerBatch and until Raft runs.
	riCounter := func(name, help string, f func(raftstore.ReadIndexStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if ri := s.ri(); ri != nil {
				return f(ri.Stats())
			}
			return 0
		})
	}
	m.reg.MustRegister(m.reserved, m.minted, m.entries, m.batch, m.commit, m.handedOut, m.fwdCalls, m.fwdBatch, m.refusals, m.promotions,
		raftGauge("fencegate_token_raft_last_index", "Raft's last log index on this node.", func(st raftstore.Status) float64 { return float64(st.LastIndex) }),
		raftGauge("fencegate_token_raft_commit_index", "Raft's commit index on this node.", func(st raftstore.Status) float64 { return float64(st.CommitIndex) }),
		raftGauge("fencegate_token_raft_applied_index", "Raft's applied index on this node.", func(st raftstore.Status) float64 { return float64(st.AppliedIndex) }),
		raftGauge("fencegate_token_raft_term", "Raft's current term on this node.", func(st raftstore.Status) float64 { return float64(st.Term) }),
		raftGauge("fencegate_token_raft_leader", "1 while this node leads, else 0.", func(st raftstore.Status) float64 {
			if st.State == "Leader" {
				return 1
			}
			return 0
		}),
		raftGauge("fencegate_token_last_token", "The counter as this node has applied it: the last token minted.", func(st raftstore.Status) float64 { return float64(st.LastToken) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencegate_token_leader_changes_total", Help: "Leaders this node has seen take over.",
		}, func() float64 {
			if st := s.Store(); st != nil {
				return float64(st.LeaderChanges())
			}
			return 0
		}),
		riCounter("fencegate_token_rounds_total", "Confirmation rounds this node began as leader on the read-index path.",
			func(st raftstore.ReadIndexStats) float64 { return float64(st.Rounds) }),
		riCounter("fencegate_token_round_failures_total", "Confirmation rounds that failed (no majority of the voters confirmed this leader in its term).",
			func(st raftstore.ReadIndexStats) float64 { return float64(st.RoundFailures) }),
		riCounter("fencegate_token_round_seconds_total", "Time spent in confirmation rounds; divide by the rounds for the mean round.",
			func(st raftstore.ReadIndexStats) float64 { return st.RoundSeconds }),
		riCounter("fencegate_token_round_hedges_total", "Confirmation rounds that also asked the voters beyond the majority they asked first, because an answer was late or failed.",
			func(st raftstore.ReadIndexStats) float64 { return float64(st.Hedges) }),
		riCounter("fencegate_token_reservations_total", "Reservation entries this node committed as leader on the read-index path.",
			func(st raftstore.ReadIndexStats) float64 { return float64(st.Reservations) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencegate_token_reserved_left", Help: "Tokens left in the reserved ranges this node hands out of as leader; 0 when it holds none.",
		}, func() float64 {
			if ri := s.ri(); ri != nil {
				if r := ri.Stats().Range; r != nil {
					return float64(r.Last - r.Next + 1)
				}
			}
			return 0
		}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// handleMetrics serves the node's metrics in Prometheus' text format.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	s.metrics.handler.ServeHTTP(w, r)
}

// committed records an allocation entry this node committed as leader.
func (m *metrics) committed(tokens int, took time.Duration) {
	m.entries.Inc()
	m.reserved.Add(float64(tokens))
	m.minted.Add(float64(tokens))
	m.batch.Observe(float64(tokens))
	m.commit.Observe(took.Seconds())
}

// served records tokens returned to callers.
func (m *metrics) served(n int) { m.handedOut.Add(float64(n)) }

// forwarded records an allocation call forwarded to the leader.
func (m *metrics) forwarded(n int) {
	m.fwdCalls.Inc()
	m.fwdBatch.Observe(float64(n))
}

// refused records an error answer.
func (m *metrics) refused(code string) { m.refusals.WithLabelValues(code).Inc() }
