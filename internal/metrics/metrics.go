// Package metrics declares syncer's Prometheus metrics. A Metrics is built
// on a registry the caller owns (no global registry), and every method is
// safe on a nil *Metrics, so libraries can take one optionally.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncer-dev/syncer/internal/buildinfo"
)

// Metrics holds the collectors.
type Metrics struct {
	ItemsExported     prometheus.Counter
	ItemsFailed       prometheus.Counter
	Batches           *prometheus.CounterVec
	PushDuration      prometheus.Histogram
	UnsyncedRows      prometheus.Gauge
	OldestUnsyncedAge prometheus.Gauge
	BreakerState      prometheus.Gauge
	RateLimited       prometheus.Counter
	LockHeld          prometheus.Gauge
	RiverJobs         *prometheus.GaugeVec
	OutboxPending     prometheus.Gauge

	// Operators' block.

	// BuildInfo is 1, labelled with the binary's version, commit and Go
	// version, so dashboards can tell which build each daemon runs.
	BuildInfo *prometheus.GaugeVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ItemsExported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncer_items_exported_total", Help: "Items the third party accepted and syncer marked synced.",
		}),
		ItemsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncer_items_failed_total", Help: "Items the third party rejected, recorded as failed.",
		}),
		Batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncer_batches_total", Help: "Batches pushed, by result (ok, partial, error).",
		}, []string{"result"}),
		PushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncer_push_duration_seconds", Help: "Time to deliver one batch, retries and splits included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		UnsyncedRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_unsynced_rows", Help: "Rows whose current version is not synced (failed ones included).",
		}),
		OldestUnsyncedAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_oldest_unsynced_age_seconds", Help: "Age of the oldest pending version.",
		}),
		BreakerState: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_breaker_state", Help: "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
		}),
		RateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncer_rate_limited_total", Help: "429 answers from the third party.",
		}),
		LockHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_lock_held", Help: "1 while this process holds the export lock.",
		}),
		RiverJobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncer_river_jobs", Help: "River jobs of syncer's kinds, by state.",
		}, []string{"kind", "state"}),
		OutboxPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_outbox_pending", Help: "Outbox events not yet relayed.",
		}),
	}
	reg.MustRegister(m.ItemsExported, m.ItemsFailed, m.Batches, m.PushDuration, m.UnsyncedRows,
		m.OldestUnsyncedAge, m.BreakerState, m.RateLimited, m.LockHeld, m.RiverJobs, m.OutboxPending)

	// Operators' block.
	m.BuildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_build_info", Help: "Always 1; the labels say which build runs.",
	}, []string{"version", "commit", "goversion"})
	bi := buildinfo.Get()
	m.BuildInfo.WithLabelValues(bi.Version, bi.Commit, bi.GoVersion).Set(1)
	reg.MustRegister(m.BuildInfo)
	return m
}

// Batch records one delivered batch.
func (m *Metrics) Batch(accepted, rejected int, took time.Duration) {
	if m == nil {
		return
	}
	m.ItemsExported.Add(float64(accepted))
	m.ItemsFailed.Add(float64(rejected))
	result := "ok"
	if rejected > 0 {
		result = "partial"
	}
	m.Batches.WithLabelValues(result).Inc()
	m.PushDuration.Observe(took.Seconds())
}

// BatchError records a batch that could not be delivered.
func (m *Metrics) BatchError() {
	if m == nil {
		return
	}
	m.Batches.WithLabelValues("error").Inc()
}

// SetLockHeld records whether this process holds the export lock.
func (m *Metrics) SetLockHeld(held bool) {
	if m == nil {
		return
	}
	if held {
		m.LockHeld.Set(1)
	} else {
		m.LockHeld.Set(0)
	}
}

// RateLimitedInc counts a 429.
func (m *Metrics) RateLimitedInc() {
	if m == nil {
		return
	}
	m.RateLimited.Inc()
}

// SetBreakerState records the breaker's state (0 closed, 1 half-open, 2 open).
func (m *Metrics) SetBreakerState(s int) {
	if m == nil {
		return
	}
	m.BreakerState.Set(float64(s))
}
