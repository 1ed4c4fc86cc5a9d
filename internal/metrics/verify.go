package metrics

import "github.com/prometheus/client_golang/prometheus"

// Verify's block: what the last verify of each source found (`syncer
// verify`, background runs, "Verify now"), read from the database by the
// gauges' refresh so every daemon shows the same, and the runs this
// process made.

// Verify holds verify's series.
type Verify struct {
	// DriftedKeys is the last finished run's keys by kind (missing,
	// stale, zombie, unknown) of a source.
	DriftedKeys *prometheus.GaugeVec
	// LastFinished is the Unix time the last run of a source finished.
	LastFinished *prometheus.GaugeVec
	// Runs counts the background runs this process ran, by result:
	// clean, drift, failed, interrupted.
	Runs *prometheus.CounterVec
}

// The kinds DriftedKeys has a series for.
var verifyKinds = []string{"missing", "stale", "zombie", "failed", "unknown"}

func newVerify(reg prometheus.Registerer) Verify {
	v := Verify{
		DriftedKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncer_verify_drifted_keys", Help: "Keys of a source the last finished verify found drifted at its destination, by kind (missing, stale, zombie; failed: its latest version was rejected; unknown: the third party did not say).",
		}, []string{"source", "destination", "kind"}),
		LastFinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncer_verify_last_finished_timestamp_seconds", Help: "Unix time the last verify of a source finished.",
		}, []string{"source", "destination"}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncer_verify_runs_total", Help: "Background verify runs this process ran, by result (clean, drift, failed, interrupted).",
		}, []string{"source", "destination", "result"}),
	}
	reg.MustRegister(v.DriftedKeys, v.LastFinished, v.Runs)
	return v
}

// SetVerifyDrift sets a source's last run's counts by kind (the kinds of
// verifyKinds; others are ignored) and when it finished.
func (m *Metrics) SetVerifyDrift(source, destination string, byKind map[string]int64, finished float64) {
	if m == nil {
		return
	}
	for _, k := range verifyKinds {
		m.Verify.DriftedKeys.WithLabelValues(source, destination, k).Set(float64(byKind[k]))
	}
	m.Verify.LastFinished.WithLabelValues(source, destination).Set(finished)
}

// VerifyRan counts a background run of source that ended with result.
func (m *Metrics) VerifyRan(source, destination, result string) {
	if m == nil {
		return
	}
	m.Verify.Runs.WithLabelValues(source, destination, result).Inc()
}
