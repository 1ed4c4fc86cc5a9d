package tenants_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// Tenants' requests count in the destination's counters, without a label
// per tenant, and no tenant sets the gauges of the destination's state: a
// refused tenant does not mark the destination refused.
func TestTenantRequestsCountInTheDestinationsCounters(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	b.exec(t, `INSERT INTO connections (account, url, token) VALUES ('acme', $1, 'tok-secret-acme'), ('globex', $2, 'tok-secret-wrong')`,
		b.url+"/t/acme", b.url+"/t/globex")
	m := metrics.New(prometheus.NewRegistry())
	dest := m.Destination("crm")
	// The destination's own deliverer's state, which tenants must leave.
	dest.SetRateLimit(7)
	dest.SetMaxInFlight(3)
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tokenQuery}, Delivery: delivery.Config{Metrics: dest}})

	_, err := deliver(t, r, "acme", 2)
	require.NoError(t, err)
	_, err = deliver(t, r, "acme", 1)
	require.NoError(t, err)
	_, err = deliver(t, r, "globex", 1)
	require.Error(t, err, "globex's token is refused")

	require.Equal(t, 2.0, testutil.ToFloat64(m.ThirdpartyResponses.WithLabelValues("crm", metrics.ResponseCode(200))))
	require.GreaterOrEqual(t, testutil.ToFloat64(m.ThirdpartyResponses.WithLabelValues("crm", "401")), 1.0)
	require.Zero(t, testutil.ToFloat64(m.RequestsInFlight.WithLabelValues("crm")), "every request started ended")
	require.NotZero(t, testutil.ToFloat64(m.LastSuccessTime.WithLabelValues("crm")))

	require.Zero(t, testutil.ToFloat64(m.CredentialsRefused.WithLabelValues("crm")), "one tenant's refusal is not the destination's")
	require.Equal(t, 7.0, testutil.ToFloat64(m.RateLimitCurrent.WithLabelValues("crm")))
	require.Equal(t, 3.0, testutil.ToFloat64(m.MaxInFlightCurrent.WithLabelValues("crm")))
	require.Zero(t, testutil.ToFloat64(m.BreakerState.WithLabelValues("crm")))
	require.Equal(t, 2, testutil.CollectAndCount(m.ThirdpartyResponses), "crm's 2xx and 401: no series per tenant")
}
