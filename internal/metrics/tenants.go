package metrics

import "github.com/prometheus/client_golang/prometheus"

// Tenants' block (docs/protocol.md section 10): a source with a tenant
// column's tenants counted by state, per destination and source. Never a
// label per tenant: 3,000 tenants would be 3,000 series per gauge.

// Tenants holds the tenants' series.
type Tenants struct {
	// ByState counts a source's tenants by state (ok, unconnected,
	// refused, paused, limited, error, invalid), as syncer status counts
	// them.
	ByState *prometheus.GaugeVec
	// UnconnectedPending counts a source's unconnected tenants with rows
	// pending: rows that wait for a connection row.
	UnconnectedPending *prometheus.GaugeVec
}

func newTenants(reg prometheus.Registerer) Tenants {
	t := Tenants{
		ByState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncer_tenants", Help: "Tenants of a source with a tenant column, by state (ok, unconnected, refused, paused, limited, error, invalid), as syncer status counts them: those with rows pending or failed, and those a person paused.",
		}, []string{"destination", "source", "state"}),
		UnconnectedPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncer_tenants_unconnected_pending", Help: "Unconnected tenants of a source (no connection row, or one that cannot be used) with rows pending: those rows wait.",
		}, []string{"destination", "source"}),
	}
	reg.MustRegister(t.ByState, t.UnconnectedPending)
	return t
}

// SetTenants sets a source's tenant gauges: counts by state (every state
// given, 0 included, so an alert's absence is never a missing series) and
// the unconnected tenants with rows pending.
func (m *Metrics) SetTenants(destination, source string, byState map[string]int, unconnectedPending int) {
	if m == nil {
		return
	}
	for state, n := range byState {
		m.Tenants.ByState.WithLabelValues(destination, source, state).Set(float64(n))
	}
	m.Tenants.UnconnectedPending.WithLabelValues(destination, source).Set(float64(unconnectedPending))
}
