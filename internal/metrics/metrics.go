// Package metrics declares syncer's Prometheus metrics. A Metrics is built
// on a registry the caller owns (no global registry), and every method is
// safe on a nil *Metrics, so libraries can take one optionally.
//
// Every series of the push path carries a destination label: a
// configured destination's name, or DefaultDestination for the export of
// resources to SYNCER_THIRDPARTY_URL. A Destination is the view one
// destination's deliverer and pipelines write through, so two
// destinations never write the same series.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncer-dev/syncer/internal/buildinfo"
)

// DefaultDestination is the destination label of the export of resources
// to SYNCER_THIRDPARTY_URL, the one destination there is without a
// configuration file.
const DefaultDestination = "default"

// ResourcesSource is the source label of resources' series: jobs.Resources,
// spelt here so that metrics imports no package of the job path (deploy/'s
// tests import metrics alone).
const ResourcesSource = "resources"

// Metrics holds the collectors.
type Metrics struct {
	// UnsyncedRows, OldestUnsyncedAge, LockHeld and FailedRows are
	// deprecated aliases of resources' series of the sources' families
	// (Deprecated, aliases.go): set with them, never alone.
	UnsyncedRows      prometheus.Gauge
	OldestUnsyncedAge prometheus.Gauge
	LockHeld          prometheus.Gauge
	RiverJobs         *prometheus.GaugeVec
	OutboxPending     prometheus.Gauge

	// Push path (delivery and the pipeline), by destination.
	ItemsExported       *prometheus.CounterVec
	ItemsFailed         *prometheus.CounterVec
	Batches             *prometheus.CounterVec
	PushDuration        *prometheus.HistogramVec
	BreakerState        *prometheus.GaugeVec
	RateLimited         *prometheus.CounterVec
	ThirdpartyResponses *prometheus.CounterVec
	LastSuccessTime     *prometheus.GaugeVec
	CredentialsRefused  *prometheus.GaugeVec
	Misconfigured       *prometheus.GaugeVec
	// RejectionStorms counts the times a destination was held because
	// every item of its recent batches was rejected for one reason.
	RejectionStorms    *prometheus.CounterVec
	RateLimitCurrent   *prometheus.GaugeVec
	MaxInFlightCurrent *prometheus.GaugeVec
	RequestsInFlight   *prometheus.GaugeVec
	// Paused is 1 while a person paused a destination (syncer pause, the
	// console).
	Paused *prometheus.GaugeVec
	// CertificateExpiry is the Unix time at which the first certificate of
	// a destination's tls files (its CA or its client certificate) ends.
	CertificateExpiry *prometheus.GaugeVec
	// Database-wide counts of failures and deletes.
	FailedRows        prometheus.Gauge
	TombstonesPending prometheus.Gauge
	TombstonesFailed  prometheus.Gauge

	// Operators' block.

	// BuildInfo is 1, labelled with the binary's version, commit and Go
	// version, so dashboards can tell which build each daemon runs.
	BuildInfo *prometheus.GaugeVec

	// Sources' block, labelled by source and destination: every source,
	// resources (ResourcesSource) as any configured one.
	SourceItemsExported *prometheus.CounterVec
	SourceItemsFailed   *prometheus.CounterVec
	SourcePending       *prometheus.GaugeVec
	SourceFailed        *prometheus.GaugeVec
	SourceOldestPending *prometheus.GaugeVec
	SourceStopped       *prometheus.GaugeVec
	SourceUncaptured    *prometheus.GaugeVec
	// SourceLockHeld is 1 while this process holds a source's export
	// lock.
	SourceLockHeld *prometheus.GaugeVec

	// Config is the configuration's block.
	Config Config
	// Console is the web console's block.
	Console Console
	// Verify is verify's block (verify.go).
	Verify Verify
	// Tenants is the tenants' block.
	Tenants Tenants
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		UnsyncedRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_unsynced_rows", Help: deprecatedHelp("syncer_unsynced_rows"),
		}),
		OldestUnsyncedAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_oldest_unsynced_age_seconds", Help: deprecatedHelp("syncer_oldest_unsynced_age_seconds"),
		}),
		LockHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_lock_held", Help: deprecatedHelp("syncer_lock_held"),
		}),
		RiverJobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncer_river_jobs", Help: "River jobs of syncer's kinds, by state.",
		}, []string{"kind", "state"}),
		OutboxPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_outbox_pending", Help: "Outbox events not yet relayed.",
		}),
	}
	reg.MustRegister(m.UnsyncedRows, m.OldestUnsyncedAge, m.LockHeld, m.RiverJobs, m.OutboxPending)
	m.newPushPath(reg)

	m.FailedRows = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncer_failed_rows", Help: deprecatedHelp("syncer_failed_rows"),
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
		Name: "syncer_source_items_exported_total", Help: "Items of a source its destination accepted and syncer marked synced.",
	}, labels)
	m.SourceItemsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_source_items_failed_total", Help: "Items of a source its destination rejected, recorded as failed.",
	}, labels)
	m.SourcePending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_pending", Help: "Keys (rows and tombstones of resources) of a source with a change not yet accepted or rejected.",
	}, labels)
	m.SourceFailed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_failed", Help: "Keys (rows and tombstones of resources) of a source whose last version sent was rejected.",
	}, labels)
	m.SourceOldestPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_oldest_pending_age_seconds", Help: "Age of a source's oldest pending change; 0 when none.",
	}, labels)
	m.SourceStopped = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_stopped", Help: "1 while nothing of a source is sent, as syncer status says STOPPED: its table no longer matches its configuration, or its destination is paused, refuses the credentials or the URL, or has its breaker open.",
	}, labels)
	m.SourceUncaptured = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_uncaptured_partitions", Help: "Partitions of a configured source's table attached or created since migrate: a TRUNCATE of one alone is not captured until migrate runs.",
	}, labels)
	m.SourceLockHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_source_lock_held", Help: "1 while this process holds a source's export lock.",
	}, labels)
	reg.MustRegister(m.SourceItemsExported, m.SourceItemsFailed, m.SourcePending, m.SourceFailed, m.SourceOldestPending,
		m.SourceStopped, m.SourceUncaptured, m.SourceLockHeld)
	m.Config = newConfig(reg)
	m.Console = newConsole(reg)
	m.Verify = newVerify(reg)
	m.Tenants = newTenants(reg)
	return m
}

// SourceBatch records the outcome of one batch of a source.
func (m *Metrics) SourceBatch(source, destination string, accepted, rejected int) {
	if m == nil {
		return
	}
	m.SourceItemsExported.WithLabelValues(source, destination).Add(float64(accepted))
	m.SourceItemsFailed.WithLabelValues(source, destination).Add(float64(rejected))
}

// SetSource sets a source's gauges: its pending and failed keys (for
// resources, rows and tombstones), its oldest pending change, whether it
// is stopped. Resources' also set their deprecated aliases.
func (m *Metrics) SetSource(source, destination string, pending, failed int64, oldest time.Duration, stopped bool) {
	if m == nil {
		return
	}
	m.SourcePending.WithLabelValues(source, destination).Set(float64(pending))
	m.SourceFailed.WithLabelValues(source, destination).Set(float64(failed))
	m.SourceOldestPending.WithLabelValues(source, destination).Set(oldest.Seconds())
	m.SourceStopped.WithLabelValues(source, destination).Set(boolValue(stopped))
	if source == ResourcesSource {
		m.UnsyncedRows.Set(float64(pending + failed))
		m.FailedRows.Set(float64(failed))
		m.OldestUnsyncedAge.Set(oldest.Seconds())
	}
}

// SetSourceUncaptured sets how many partitions of a configured source's
// table lack its TRUNCATE trigger (sources.UncapturedPartitions).
func (m *Metrics) SetSourceUncaptured(source, destination string, partitions int) {
	if m == nil {
		return
	}
	m.SourceUncaptured.WithLabelValues(source, destination).Set(float64(partitions))
}

// SetLockHeld records whether this process holds source's export lock;
// resources' also sets syncer_lock_held, its deprecated alias.
func (m *Metrics) SetLockHeld(source, destination string, held bool) {
	if m == nil {
		return
	}
	m.SourceLockHeld.WithLabelValues(source, destination).Set(boolValue(held))
	if source == ResourcesSource {
		m.LockHeld.Set(boolValue(held))
	}
}

// Push path (delivery): what the third party answers and how syncer paces
// it.

func (m *Metrics) newPushPath(reg prometheus.Registerer) {
	dest := []string{"destination"}
	m.ItemsExported = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_items_exported_total", Help: "Items the destination accepted and syncer marked synced.",
	}, dest)
	m.ItemsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_items_failed_total", Help: "Items the destination rejected, recorded as failed.",
	}, dest)
	m.Batches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_batches_total", Help: "Batches pushed, by destination and result (ok, partial, error).",
	}, []string{"destination", "result"})
	m.PushDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "syncer_push_duration_seconds", Help: "Time to deliver one batch, retries and splits included, by destination and result (ok, failed).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
	}, []string{"destination", "result"})
	m.BreakerState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_breaker_state", Help: "A destination's circuit breaker: 0 closed, 1 half-open, 2 open.",
	}, dest)
	m.RateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_rate_limited_total", Help: "429 answers from a destination.",
	}, dest)
	m.ThirdpartyResponses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_thirdparty_responses_total",
		Help: "Requests to a destination by answer: the status for those the protocol names " +
			"(400, 401, 403, 404, 408, 409, 410, 413, 422, 429), else its class (2xx, 3xx, 4xx, 5xx); error when no answer came.",
	}, []string{"destination", "code"})
	m.LastSuccessTime = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_thirdparty_last_success_timestamp_seconds", Help: "Unix time of the last request a destination accepted.",
	}, dest)
	m.CredentialsRefused = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_credentials_refused", Help: "1 while a destination refuses the credentials (401, 403).",
	}, dest)
	m.Misconfigured = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_thirdparty_misconfigured", Help: "1 while a destination's URL redirects or does not exist (3xx, 404, 410), its request program fails on every row, or a rejection storm holds it.",
	}, dest)
	m.RejectionStorms = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncer_rejection_storms_total", Help: "Times a destination was held because every item of its recent batches was rejected for one reason (its rows kept pending, none failed).",
	}, dest)
	m.RateLimitCurrent = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_rate_limit_current", Help: "Requests a second syncer allows itself to a destination now (configured, learnt or advertised); 0 means no limit.",
	}, dest)
	m.MaxInFlightCurrent = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_max_in_flight_current", Help: "The most requests to a destination allowed unanswered at once.",
	}, dest)
	m.RequestsInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_requests_in_flight", Help: "Requests to a destination unanswered now.",
	}, dest)
	m.Paused = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_destination_paused", Help: "1 while a person paused a destination (syncer pause, the console): nothing is sent to it.",
	}, dest)
	m.CertificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncer_destination_certificate_expiry_timestamp_seconds",
		Help: "When the first certificate of a destination's tls files (ca_file, cert_file) ends, as a Unix time.",
	}, dest)
	reg.MustRegister(m.ItemsExported, m.ItemsFailed, m.Batches, m.PushDuration, m.BreakerState, m.RateLimited,
		m.ThirdpartyResponses, m.LastSuccessTime, m.CredentialsRefused, m.Misconfigured, m.RejectionStorms,
		m.RateLimitCurrent, m.MaxInFlightCurrent, m.RequestsInFlight, m.Paused, m.CertificateExpiry)
}

// Destination is the push path's metrics of one destination: every series
// it writes carries the destination's label. Its methods are safe on a
// nil *Destination.
type Destination struct {
	m    *Metrics
	name string
	// The series touched on every request, looked up once: a label lookup
	// hashes the labels each time. The last two appear at their first use,
	// as a series looked up each time would: a last success of 0 would
	// read as "never" to an alert.
	inFlight    prometheus.Gauge
	lastSuccess func() prometheus.Gauge
	accepted    func() prometheus.Counter
	// shared marks a view given to one of several deliverers of the
	// destination (its tenants', Shared): it adds to the counters but
	// leaves the gauges of one deliverer's state alone.
	shared bool
}

// Destination returns the view of destination name, creating its series
// so that a dashboard or an alert finds them before its first push. Nil
// on a nil *Metrics.
func (m *Metrics) Destination(name string) *Destination {
	if m == nil {
		return nil
	}
	d := &Destination{m: m, name: name}
	for _, r := range []string{"ok", "failed"} {
		m.PushDuration.WithLabelValues(name, r)
	}
	m.ItemsExported.WithLabelValues(name)
	m.ItemsFailed.WithLabelValues(name)
	m.RateLimited.WithLabelValues(name)
	m.BreakerState.WithLabelValues(name)
	m.CredentialsRefused.WithLabelValues(name)
	m.Misconfigured.WithLabelValues(name)
	m.RejectionStorms.WithLabelValues(name)
	m.Paused.WithLabelValues(name)
	d.inFlight = m.RequestsInFlight.WithLabelValues(name)
	d.lastSuccess = sync.OnceValue(func() prometheus.Gauge { return m.LastSuccessTime.WithLabelValues(name) })
	d.accepted = sync.OnceValue(func() prometheus.Counter {
		return m.ThirdpartyResponses.WithLabelValues(name, ResponseCode(http.StatusOK))
	})
	return d
}

// Name is the destination's label.
func (d *Destination) Name() string {
	if d == nil {
		return ""
	}
	return d.name
}

// Batch records one delivered batch.
func (d *Destination) Batch(accepted, rejected int, took time.Duration) {
	if d == nil {
		return
	}
	d.m.ItemsExported.WithLabelValues(d.name).Add(float64(accepted))
	d.m.ItemsFailed.WithLabelValues(d.name).Add(float64(rejected))
	result := "ok"
	if rejected > 0 {
		result = "partial"
	}
	d.m.Batches.WithLabelValues(d.name, result).Inc()
	d.m.PushDuration.WithLabelValues(d.name, "ok").Observe(took.Seconds())
}

// BatchFailed records a batch that could not be delivered after took: it
// counts as an error batch and in the push histogram as failed.
func (d *Destination) BatchFailed(took time.Duration) {
	if d == nil {
		return
	}
	d.m.Batches.WithLabelValues(d.name, "error").Inc()
	d.m.PushDuration.WithLabelValues(d.name, "failed").Observe(took.Seconds())
}

// RateLimitedInc counts a 429.
func (d *Destination) RateLimitedInc() {
	if d == nil {
		return
	}
	d.m.RateLimited.WithLabelValues(d.name).Inc()
}

// SetBreakerState records the breaker's state (0 closed, 1 half-open, 2 open).
func (d *Destination) SetBreakerState(s int) {
	if d == nil || d.shared {
		return
	}
	d.m.BreakerState.WithLabelValues(d.name).Set(float64(s))
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
func (d *Destination) Response(status int) {
	if d == nil {
		return
	}
	if status >= 200 && status < 300 {
		d.accepted().Inc()
		return
	}
	d.m.ThirdpartyResponses.WithLabelValues(d.name, ResponseCode(status)).Inc()
}

// LastSuccess records when the third party last accepted a request.
func (d *Destination) LastSuccess(t time.Time) {
	if d == nil {
		return
	}
	d.lastSuccess().Set(float64(t.UnixNano()) / 1e9)
}

// SetCredentialsRefused records whether the credentials are refused.
func (d *Destination) SetCredentialsRefused(refused bool) {
	if d == nil || d.shared {
		return
	}
	d.m.CredentialsRefused.WithLabelValues(d.name).Set(boolValue(refused))
}

// SetMisconfigured records whether the third party's URL is refused.
func (d *Destination) SetMisconfigured(refused bool) {
	if d == nil || d.shared {
		return
	}
	d.m.Misconfigured.WithLabelValues(d.name).Set(boolValue(refused))
}

// AddRejectionStorm counts a rejection storm's hold of the destination.
func (d *Destination) AddRejectionStorm() {
	if d == nil {
		return
	}
	d.m.RejectionStorms.WithLabelValues(d.name).Inc()
}

// SetPaused records whether a person paused the destination.
func (d *Destination) SetPaused(paused bool) {
	if d == nil || d.shared {
		return
	}
	d.m.Paused.WithLabelValues(d.name).Set(boolValue(paused))
}

// SetRateLimit records the request rate allowed now; 0 means none.
func (d *Destination) SetRateLimit(perSecond float64) {
	if d == nil || d.shared {
		return
	}
	d.m.RateLimitCurrent.WithLabelValues(d.name).Set(perSecond)
}

// SetMaxInFlight records the in-flight limit.
func (d *Destination) SetMaxInFlight(n int) {
	if d == nil || d.shared {
		return
	}
	d.m.MaxInFlightCurrent.WithLabelValues(d.name).Set(float64(n))
}

// RequestStarted and RequestEnded count the requests unanswered.
func (d *Destination) RequestStarted() {
	if d == nil {
		return
	}
	d.inFlight.Inc()
}

// RequestEnded: see RequestStarted.
func (d *Destination) RequestEnded() {
	if d == nil {
		return
	}
	d.inFlight.Dec()
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// SetCertificateExpiry records when the first certificate of a
// destination's tls files ends.
func (m *Metrics) SetCertificateExpiry(destination string, notAfter time.Time) {
	m.CertificateExpiry.WithLabelValues(destination).Set(float64(notAfter.Unix()))
}
