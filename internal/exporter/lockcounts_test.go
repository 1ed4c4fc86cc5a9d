package exporter

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// A source's lock series follows the count of its jobs holding it, not
// the last job's word; a lane counts as its source; a move to another
// destination zeroes the old label.
func TestLockCountsFollowTheCount(t *testing.T) {
	t.Parallel()
	m := metrics.New(prometheus.NewRegistry())
	c := &lockCounts{metrics: m}
	held := func(src, dest string) float64 {
		return testutil.ToFloat64(m.SourceLockHeld.WithLabelValues(src, dest))
	}

	c.count("contacts", "crm", 0)
	require.Zero(t, held("contacts", "crm"), "announced at 0")
	c.count("contacts", "crm", 1)
	c.count("contacts@2", "crm", 1) // a lane of contacts
	c.count("contacts", "", -1)     // the lost lock's late release
	require.Equal(t, 1.0, held("contacts", "crm"), "one job still holds it")
	c.count("contacts@2", "", -1)
	require.Zero(t, held("contacts", "crm"))

	c.count("contacts", "erp", 1)
	require.Zero(t, held("contacts", "crm"), "the old destination's series says 0")
	require.Equal(t, 1.0, held("contacts", "erp"))
}

// A run's last key is its own lock's, and taken once.
func TestLastKeysAreTheRunsOwn(t *testing.T) {
	t.Parallel()
	var k lastKeys
	a, b := new(locks.Lock), new(locks.Lock)
	k.pushed(a, "ka1")
	k.pushed(b, "kb")
	k.pushed(a, "ka2")
	k.pushed(nil, "none")
	require.Equal(t, "ka2", k.take(a))
	require.Empty(t, k.take(a), "taken once")
	require.Equal(t, "kb", k.take(b))
}
