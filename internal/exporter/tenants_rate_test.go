package exporter_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 54 point 14 (contract 10.1): tenants sharing a lane each reach
// their own limit. Tenants limited to 4 requests/s each, each with a
// backlog of 30 batches: while every tenant has rows, each sends at
// least 0.9 of its limit. Counted over a window, never timed. 8 tenants
// in 2 lanes is the contract's case; 24 in one lane is a lane whose
// tenants' batches waiting for their tokens outnumbered its 32 places
// (2.7 to 3.5/s each before the places grew with its paced tenants;
// at 2/s they do not outnumber them). The two run one after the
// other: together they are 128 requests/s under -race, and measured the
// spare CPU of CI's busy machine more than the lanes. Not parallel:
// it runs while no other test of the package does, as a rate measured
// beside 20 other daemons measured the package's load (a tenant of CI
// at 3.59/s, its lane-mates at 3.76 to 3.92/s).
func TestTenantsSharingLanesReachTheirOwnLimits(t *testing.T) {
	for _, tt := range []struct {
		name           string
		tenants, lanes int
	}{
		{"8 tenants in 2 lanes", 8, 2},
		{"24 tenants in one lane", 24, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sharedLaneRates(t, tt.tenants, tt.lanes)
		})
	}
}

func sharedLaneRates(t *testing.T, tenants, lanes int) {
	t.Helper()
	const limit, batches = 4.0, 30
	b := tenantSetup(t, lanes, nil)
	b.batch = 10
	b.exec(t, `INSERT INTO contacts SELECT i, 'r' || (i % $1), 'x' FROM generate_series(1, $2) i`, tenants, tenants*batches*10)
	b.daemon(t, &tenantDests{url: b.url, rateLimit: limit}, 0, 1)
	require.Eventually(t, func() bool {
		for i := range tenants {
			if b.pending(t, fmt.Sprintf("r%d", i)) > 0 {
				return false
			}
		}
		return true
	}, 2*time.Minute, 100*time.Millisecond)

	// Each tenant's requests, by the time its account took them (one
	// Idempotency-Key a request).
	sent := map[string][]time.Time{}
	for i := range tenants {
		tenant := fmt.Sprintf("r%d", i)
		at := map[string]time.Time{}
		for _, d := range b.fake.TenantDeliveries(tenant) {
			at[d.Key] = d.At
		}
		for _, a := range at {
			sent[tenant] = append(sent[tenant], a)
		}
		slices.SortFunc(sent[tenant], time.Time.Compare)
		require.GreaterOrEqual(t, len(sent[tenant]), batches, tenant)
	}
	// The window: from every tenant's first request (a second later: the
	// lanes' start) to the first tenant's last (its backlog drained).
	var from, to time.Time
	for _, ts := range sent {
		if first := ts[0]; first.After(from) {
			from = first
		}
		if last := ts[len(ts)-1]; to.IsZero() || last.Before(to) {
			to = last
		}
	}
	from = from.Add(time.Second)
	require.Greater(t, to.Sub(from), 2*time.Second, "a window while every tenant has a backlog")
	var rates []string
	low := map[string]float64{}
	for tenant, ts := range sent {
		n := 0
		for _, a := range ts {
			if !a.Before(from) && a.Before(to) {
				n++
			}
		}
		rate := float64(n) / to.Sub(from).Seconds()
		rates = append(rates, fmt.Sprintf("%s %.2f/s", tenant, rate))
		if rate < 0.9*limit {
			low[tenant] = rate
		}
	}
	slices.Sort(rates)
	t.Logf("over %.1fs: %s", to.Sub(from).Seconds(), strings.Join(rates, ", "))
	require.Empty(t, low, "each tenant reaches 0.9 of its limit of %v/s", limit)
}
