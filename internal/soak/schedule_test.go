package soak

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A seed is a schedule: the same seed draws the same faults, so a failed
// run replays; every kind is drawn even in a short run, one API outage
// among them, and nothing starts in the quiet tail.
func TestScheduleIsTheSeeds(t *testing.T) {
	t.Parallel()
	a := schedule(42, time.Minute, 3, LeaseDefault)
	require.Equal(t, a, schedule(42, time.Minute, 3, LeaseDefault))
	require.NotEqual(t, a, schedule(43, time.Minute, 3, LeaseDefault))
	kinds := map[string]int{}
	for _, f := range a {
		kinds[f.Kind]++
		require.Less(t, f.At, time.Minute-time.Minute/5, "%+v starts in the quiet tail", f)
		if f.Kind == daemonStop {
			require.Greater(t, f.For, LeaseDefault, "a freeze outlasts the lease")
		}
	}
	for _, k := range []string{daemonKill, daemonStop, daemonTerm, pgTerminate, pgRestart, proxyBlackholed, proxyResets,
		api5xx, api429Bare, api429Retry, apiLatency, apiReset, apiSlowBody} {
		require.NotZero(t, kinds[k], k)
	}
	require.Equal(t, 1, kinds[apiOutage])
	long := schedule(7, 10*time.Minute, 3, LeaseDefault)
	for _, f := range long {
		if f.Kind == apiOutage {
			require.Equal(t, time.Minute, f.For, "a long run's outage lasts a minute")
		}
	}
}
