package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A grid's ticks stay at its origin plus whole periods, whenever the
// loop asks for the next one: the loops' phases never drift together.
func TestGridTicksAtItsPhase(t *testing.T) {
	t.Parallel()
	origin := time.Now().Add(time.Hour)
	g := &grid{origin: origin, period: 500 * time.Millisecond}
	require.Equal(t, time.Hour, g.untilNext(origin.Add(-time.Hour)), "the first tick at the origin")
	require.Equal(t, 500*time.Millisecond, g.untilNext(origin), "a tick just taken: the next one")
	require.Equal(t, 300*time.Millisecond, g.untilNext(origin.Add(200*time.Millisecond)))
	require.Equal(t, 100*time.Millisecond, g.untilNext(origin.Add(1900*time.Millisecond)), "ticks missed are dropped, the phase kept")

	// The loops' slots are apart from each other and from River's, at
	// whole periods of 2 s from the start, by 100 ms at least within the
	// presence's beat of 500 ms.
	slots := []time.Duration{0, phaseGauges, phasePresence, phaseHistory, phaseVerify, phaseTenants, phasePurge, phasePresence + 500*time.Millisecond}
	for i, a := range slots {
		for _, b := range slots[i+1:] {
			gap := (a - b).Abs() % time.Second
			require.GreaterOrEqual(t, min(gap, time.Second-gap), 100*time.Millisecond, "%s and %s", a, b)
		}
	}
}
