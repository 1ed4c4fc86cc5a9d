package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// Every deprecated name is served, with the value of resources' series of
// the family it is an alias of; a configured source's series leave them
// alone.
func TestDeprecatedNamesAliasResourcesSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	res := []string{jobs.Resources, metrics.DefaultDestination}
	m.SetSource(jobs.Resources, metrics.DefaultDestination, 7, 2, 90*time.Second, false)
	m.SetLockHeld(jobs.Resources, metrics.DefaultDestination, true)
	m.SetSource("orders", "crm", 100, 50, time.Hour, true)
	m.SetLockHeld("orders", "crm", false)

	alias := map[string][2]float64{
		"syncer_unsynced_rows": {testutil.ToFloat64(m.UnsyncedRows),
			testutil.ToFloat64(m.SourcePending.WithLabelValues(res...)) + testutil.ToFloat64(m.SourceFailed.WithLabelValues(res...))},
		"syncer_failed_rows": {testutil.ToFloat64(m.FailedRows), testutil.ToFloat64(m.SourceFailed.WithLabelValues(res...))},
		"syncer_oldest_unsynced_age_seconds": {testutil.ToFloat64(m.OldestUnsyncedAge),
			testutil.ToFloat64(m.SourceOldestPending.WithLabelValues(res...))},
		"syncer_lock_held": {testutil.ToFloat64(m.LockHeld), testutil.ToFloat64(m.SourceLockHeld.WithLabelValues(res...))},
	}
	require.Len(t, alias, len(metrics.Deprecated), "every deprecated name is checked")
	for name, v := range alias {
		require.Contains(t, metrics.Deprecated, name)
		require.InDelta(t, v[1], v[0], 0, "%s is %s", name, metrics.Deprecated[name])
	}
	require.InDelta(t, 9.0, testutil.ToFloat64(m.UnsyncedRows), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(m.LockHeld), 0)

	served := map[string]bool{}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		served[f.GetName()] = true
	}
	for name := range metrics.Deprecated {
		require.True(t, served[name], "%s is served", name)
	}
	require.True(t, served["syncer_source_lock_held"])
}
