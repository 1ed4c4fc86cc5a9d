// Package metrics declares syncer's Prometheus metrics. A Metrics is built
// on a registry the caller owns (no global registry), and every method is
// safe on a nil *Metrics, so libraries can take one optionally.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncer-dev/syncer/internal/buildinfo"
)

// Metrics holds the collectors.
type Metrics struct {
	ItemsExported     prometheus.Counter
	ItemsFailed       prometheus.Counter
	Batches           *prometheus.CounterVec
	PushDuration      *prometheus.HistogramVec
	UnsyncedRows      prometheus.Gauge
	OldestUnsyncedAge prometheus.Gauge
	BreakerState      prometheus.Gauge
	RateLimited       prometheus.Counter
	LockHeld          prometheus.Gauge
	RiverJobs         *prometheus.GaugeVec
	OutboxPending     prometheus.Gauge

	// Push path (delivery).
	ThirdpartyResponses *prometheus.CounterVec
	LastSuccessTime     prometheus.Gauge
	CredentialsRefused  prometheus.Gauge
	Misconfigured       prometheus.Gauge
	RateLimitCurrent    prometheus.Gauge
	MaxInFlightCurrent  prometheus.Gauge
	RequestsInFlight    prometheus.Gauge
	// Database-wide counts of failures and deletes.
	FailedRows        prometheus.Gauge
	TombstonesPending prometheus.Gauge
	TombstonesFailed  prometheus.Gauge

	// Operators' block.

	// BuildInfo is 1, labelled with the binary's version, commit and Go
	// version, so dashboards can tell which build each daemon runs.
	BuildInfo *prometheus.GaugeVec

	// Sources' block (SYNCER_CONFIG), labelled by source and destination.
	SourceItemsExported *prometheus.CounterVec
	SourceItemsFailed   *prometheus.CounterVec
	SourcePending       *prometheus.GaugeVec
	SourceFailed        *prometheus.GaugeVec
	SourceOldestPending *prometheus.GaugeVec
	SourceStopped       *prometheus.GaugeVec
	SourceUncaptured    *prometheus.GaugeVec
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
		PushDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "syncer_push_duration_seconds", Help: "Time to deliver one batch, retries and splits included, by result (ok, failed).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"result"}),
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
	m.newPushPath(reg)
	// Both results exist from the start, so a dashboard or an alert on a
	// daemon that has not pushed yet finds the series.
	for _, r := range []string{"ok", "failed"} {
		m.PushDuration.WithLabelValues(r)
	}

	m.FailedRows = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_failed_rows", Help: "Rows and tombstones whose current version the third party rejected.",
	})
	m.TombstonesPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_tombstones_pending", Help: "Deletes not yet delivered to the third party.",
	})
	m.TombstonesFailed = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_tombstones_failed", Help: "Deletes the third party rejected.",
	})
	reg.MustRegister(m.FailedRows, m.TombstonesPending, m.TombstonesFailed)

	// Operators' block.
	m.BuildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_build_info", Help: "Always 1; the labels say which build runs.",
	}, []string{"version", "commit", "goversion"})
	bi := buildinfo.Get()
	m.BuildInfo.WithLabelValues(bi.Version, bi.Commit, bi.GoVersion).Set(1)
	reg.MustRegister(m.BuildInfo)

	// Sources' block.
	labels := []string{"source", "destination"}
	m.SourceItemsExported = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_source_items_exported_total", Help: "Items of a configured source its destination accepted and syncer marked synced.",
	}, labels)
	m.SourceItemsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_source_items_failed_total", Help: "Items of a configured source its destination rejected, recorded as failed.",
	}, labels)
	m.SourcePending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_pending", Help: "Keys of a configured source with a change not yet accepted or rejected.",
	}, labels)
	m.SourceFailed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_failed", Help: "Keys of a configured source whose last version sent was rejected.",
	}, labels)
	m.SourceOldestPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_oldest_pending_age_seconds", Help: "Age of a configured source's oldest pending change; 0 when none.",
	}, labels)
	m.SourceStopped = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_stopped", Help: "1 while a configured source is stopped because its table no longer matches its configuration.",
	}, labels)
	m.SourceUncaptured = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_uncaptured_partitions", Help: "Partitions of a configured source's table attached or created since migrate: a TRUNCATE of one alone is not captured until migrate runs.",
	}, labels)
	reg.MustRegister(m.SourceItemsExported, m.SourceItemsFailed, m.SourcePending, m.SourceFailed, m.SourceOldestPending, m.SourceStopped, m.SourceUncaptured)
	return m
}

// SourceBatch records the outcome of one batch of a configured source.
func (m *Metrics) SourceBatch(source, destination string, accepted, rejected int) {
	if m == nil {
		return
	}
	m.SourceItemsExported.WithLabelValues(source, destination).Add(float64(accepted))
	m.SourceItemsFailed.WithLabelValues(source, destination).Add(float64(rejected))
}

// SetSource sets a configured source's gauges.
func (m *Metrics) SetSource(source, destination string, pending, failed int64, oldest time.Duration, stopped bool) {
	if m == nil {
		return
	}
	m.SourcePending.WithLabelValues(source, destination).Set(float64(pending))
	m.SourceFailed.WithLabelValues(source, destination).Set(float64(failed))
	m.SourceOldestPending.WithLabelValues(source, destination).Set(oldest.Seconds())
	m.SourceStopped.WithLabelValues(source, destination).Set(boolValue(stopped))
}

// SetSourceUncaptured sets how many partitions of a configured source's
// table lack its TRUNCATE trigger (sources.UncapturedPartitions).
func (m *Metrics) SetSourceUncaptured(source, destination string, partitions int) {
	if m == nil {
		return
	}
	m.SourceUncaptured.WithLabelValues(source, destination).Set(float64(partitions))
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
	m.PushDuration.WithLabelValues("ok").Observe(took.Seconds())
}

// BatchFailed records a batch that could not be delivered after took: it
// counts as an error batch and in the push histogram as failed.
func (m *Metrics) BatchFailed(took time.Duration) {
	if m == nil {
		return
	}
	m.Batches.WithLabelValues("error").Inc()
	m.PushDuration.WithLabelValues("failed").Observe(took.Seconds())
}

// BatchError records a batch that could not be delivered, without its
// duration; BatchFailed also puts it in the push histogram.
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

// Push path (delivery): what the third party answers and how syncer paces
// it.

func (m *Metrics) newPushPath(reg prometheus.Registerer) {
	m.ThirdpartyResponses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_thirdparty_responses_total",
		Help: "Requests to the third party by answer: the status for those the protocol names " +
			"(400, 401, 403, 404, 408, 409, 410, 413, 422, 429), else its class (2xx, 3xx, 4xx, 5xx); error when no answer came.",
	}, []string{"code"})
	m.LastSuccessTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_thirdparty_last_success_timestamp_seconds", Help: "Unix time of the last request the third party accepted.",
	})
	m.CredentialsRefused = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_credentials_refused", Help: "1 while the third party refuses the credentials (401, 403).",
	})
	m.Misconfigured = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_thirdparty_misconfigured", Help: "1 while the third party's URL redirects or does not exist (3xx, 404, 410).",
	})
	m.RateLimitCurrent = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_rate_limit_current", Help: "Requests a second syncer allows itself now (configured, learnt or advertised); 0 means no limit.",
	})
	m.MaxInFlightCurrent = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_max_in_flight_current", Help: "The most requests to the third party allowed unanswered at once.",
	})
	m.RequestsInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_requests_in_flight", Help: "Requests to the third party unanswered now.",
	})
	reg.MustRegister(m.ThirdpartyResponses, m.LastSuccessTime, m.CredentialsRefused, m.Misconfigured,
		m.RateLimitCurrent, m.MaxInFlightCurrent, m.RequestsInFlight)
}

// ResponseCode is the bounded label of syncer_thirdparty_responses_total for
// an HTTP status; 0 (no answer) is "error".
func ResponseCode(status int) string {
	switch status {
	case 0:
		return "error"
	case 400, 401, 403, 404, 408, 409, 410, 413, 422, 429:
		return strconv.Itoa(status)
	}
	switch {
	case status >= 200 && status < 300:
		return "2xx"
	case status >= 300 && status < 400:
		return "3xx"
	case status >= 400 && status < 500:
		return "4xx"
	case status >= 500 && status < 600:
		return "5xx"
	}
	return "error"
}

// Response counts one request's answer (status 0: none came).
func (m *Metrics) Response(status int) {
	if m == nil {
		return
	}
	m.ThirdpartyResponses.WithLabelValues(ResponseCode(status)).Inc()
}

// LastSuccess records when the third party last accepted a request.
func (m *Metrics) LastSuccess(t time.Time) {
	if m == nil {
		return
	}
	m.LastSuccessTime.Set(float64(t.UnixNano()) / 1e9)
}

// SetCredentialsRefused records whether the credentials are refused.
func (m *Metrics) SetCredentialsRefused(refused bool) {
	if m == nil {
		return
	}
	m.CredentialsRefused.Set(boolValue(refused))
}

// SetMisconfigured records whether the third party's URL is refused.
func (m *Metrics) SetMisconfigured(refused bool) {
	if m == nil {
		return
	}
	m.Misconfigured.Set(boolValue(refused))
}

// SetRateLimit records the request rate allowed now; 0 means none.
func (m *Metrics) SetRateLimit(perSecond float64) {
	if m == nil {
		return
	}
	m.RateLimitCurrent.Set(perSecond)
}

// SetMaxInFlight records the in-flight limit.
func (m *Metrics) SetMaxInFlight(n int) {
	if m == nil {
		return
	}
	m.MaxInFlightCurrent.Set(float64(n))
}

// RequestStarted and RequestEnded count the requests unanswered.
func (m *Metrics) RequestStarted() {
	if m == nil {
		return
	}
	m.RequestsInFlight.Inc()
}

// RequestEnded: see RequestStarted.
func (m *Metrics) RequestEnded() {
	if m == nil {
		return
	}
	m.RequestsInFlight.Dec()
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
