package metrics

import "github.com/prometheus/client_golang/prometheus"

// Configuration's block: whether the daemon runs the configuration file
// and the sources migrate installed (daemon.Supervise reads both again).

// Config holds the configuration's series.
type Config struct {
	// LastReloadSuccessful is 0 when the configuration read last (the file
	// changed, or migrate changed the sources) could not be run: the daemon
	// keeps running the previous one.
	LastReloadSuccessful prometheus.Gauge
	// LastReloadTime is when the daemon last started running a
	// configuration, in Unix seconds.
	LastReloadTime prometheus.Gauge
	// SourceUnconfigured is 1 for a source migrate installed that this
	// daemon's configuration file does not name: this daemon does not
	// export it.
	SourceUnconfigured *prometheus.GaugeVec
	// JobsAbandoned counts the jobs a reload or a shutdown asked to stop
	// that did not return within their bound: left running, no longer
	// waited on, their locks given up. Each one is a goroutine that may
	// still hold a core (a program that ignores its context).
	JobsAbandoned *prometheus.CounterVec
}

func newConfig(reg prometheus.Registerer) Config {
	c := Config{
		LastReloadSuccessful: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_config_last_reload_successful", Help: "0 when the configuration file or the installed sources changed and the daemon could not run them: it runs the previous configuration.",
		}),
		LastReloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncer_config_last_reload_success_timestamp_seconds", Help: "When the daemon started running its current configuration.",
		}),
		SourceUnconfigured: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncer_source_unconfigured", Help: "1 for a source syncer migrate installed that this daemon's configuration file does not name, so this daemon does not export it.",
		}, []string{"source"}),
		JobsAbandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncer_jobs_abandoned_total", Help: "Export jobs asked to stop (by a reload or a shutdown) that did not return within their bound: left running, their locks given up.",
		}, []string{"source", "destination"}),
	}
	c.LastReloadSuccessful.Set(1)
	reg.MustRegister(c.LastReloadSuccessful, c.LastReloadTime, c.SourceUnconfigured, c.JobsAbandoned)
	return c
}

// JobAbandoned counts a job of source, pushing to destination, that was
// abandoned.
func (m *Metrics) JobAbandoned(source, destination string) {
	if m == nil {
		return
	}
	m.Config.JobsAbandoned.WithLabelValues(source, destination).Inc()
}
