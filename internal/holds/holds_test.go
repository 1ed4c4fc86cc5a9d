package holds

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A key's wait doubles from Initial to Max, jitter only shortens it, and a
// key deferred again at the same version keeps its first time; a new
// version starts over.
func TestHeldBacksOffPerKey(t *testing.T) {
	t.Parallel()
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second, Bound: 3 * time.Second}
	now := time.Unix(1000, 0)
	noJitter := func() float64 { return 0 }
	var prior map[ID]Hold
	var waits []time.Duration
	for i := range 6 {
		at := now.Add(time.Duration(i) * time.Second)
		hs := Held("source:orders", []Deferred{{Key: "4", Version: 2, Reason: "429 busy"}}, at, prior, p, noJitter)
		require.Len(t, hs, 1)
		h := hs[0]
		require.Equal(t, i+1, h.Tries)
		require.Equal(t, now, h.Since, "the first transient answer's time stays")
		require.Equal(t, now.Add(3*time.Second), h.HeldAt)
		waits = append(waits, h.Next.Sub(at))
		prior = map[ID]Hold{{Key: "4"}: h}
	}
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, time.Second, time.Second}, waits)
	require.False(t, prior[ID{Key: "4"}].Holding(now.Add(2*time.Second)))
	require.True(t, prior[ID{Key: "4"}].Holding(now.Add(3*time.Second)))

	hs := Held("source:orders", []Deferred{{Key: "4", Version: 3}}, now.Add(time.Minute), prior, p, noJitter)
	require.Equal(t, 1, hs[0].Tries, "a new version starts over")
	require.Equal(t, now.Add(time.Minute), hs[0].Since)

	hs = Held("source:orders", []Deferred{{Key: "4", Version: 3}}, now, nil, p, func() float64 { return 0.99 })
	require.Less(t, hs[0].Next.Sub(now), 100*time.Millisecond, "jitter shortens")
	require.Greater(t, hs[0].Next.Sub(now), 79*time.Millisecond, "by a fifth at most")
}
