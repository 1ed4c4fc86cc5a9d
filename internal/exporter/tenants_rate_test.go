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
			limits := make([]float64, tt.tenants)
			for i := range limits {
				limits[i] = 4
			}
			sharedLaneRates(t, limits, tt.lanes)
		})
	}
}

// sharedLaneRates drains tenants r0..r(n-1) of limits (tenant i limited
// to limits[i] requests/s, with a backlog of 7.5 s at it, batches of 10)
// in lanes, and requires each to reach 0.9 of its limit while every
// tenant has rows.
func sharedLaneRates(t *testing.T, limits []float64, lanes int) {
	t.Helper()
	const backlog = 7.5 // seconds at its limit
	b := tenantSetup(t, lanes, nil)
	b.batch = 10
	rates := map[string]float64{}
	var names []string
	var rows []int
	for i, l := range limits {
		name := fmt.Sprintf("r%d", i)
		rates[name] = l
		names, rows = append(names, name), append(rows, int(l*backlog)*10)
	}
	b.exec(t, `INSERT INTO contacts SELECT row_number() OVER (), t.name, 'x'
		FROM unnest($1::text[], $2::int[]) AS t(name, rows), generate_series(1, t.rows)`, names, rows)
	b.daemon(t, &tenantDests{url: b.url, rates: rates}, 0, 1)
	require.Eventually(t, func() bool {
		for _, name := range names {
			if b.pending(t, name) > 0 {
				return false
			}
		}
		return true
	}, 2*time.Minute, 100*time.Millisecond)

	// Each tenant's requests, by the time its account took them (one
	// Idempotency-Key a request).
	sent := map[string][]time.Time{}
	for i, tenant := range names {
		at := map[string]time.Time{}
		for _, d := range b.fake.TenantDeliveries(tenant) {
			at[d.Key] = d.At
		}
		for _, a := range at {
			sent[tenant] = append(sent[tenant], a)
		}
		slices.SortFunc(sent[tenant], time.Time.Compare)
		require.GreaterOrEqual(t, len(sent[tenant]), rows[i]/10, tenant)
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
	var got []string
	low := map[string]float64{}
	for tenant, ts := range sent {
		n := 0
		for _, a := range ts {
			if !a.Before(from) && a.Before(to) {
				n++
			}
		}
		rate := float64(n) / to.Sub(from).Seconds()
		got = append(got, fmt.Sprintf("%s %.2f/s of %g", tenant, rate, rates[tenant]))
		if rate < 0.9*rates[tenant] {
			low[tenant] = rate
		}
	}
	slices.Sort(got)
	t.Logf("over %.1fs: %s", to.Sub(from).Seconds(), strings.Join(got, ", "))
	require.Empty(t, low, "each tenant reaches 0.9 of its own limit")
}

// Issue 54: tenants of different limits in one lane each reach their
// own. The lane gave each tenant one page a turn whatever its rate, so a
// tenant at 10/s had its turn as rarely as one at 2/s, and sent at the
// pace of the turns (the bench's 200 tenants at 2, 5 and 10/s: the 10/s
// ones at a median of 0.37x). Not parallel: its 56 requests/s under
// -race are the test.
func TestTenantsOfDifferentLimitsInOneLane(t *testing.T) {
	limits := []float64{10, 10, 10, 10}
	for range 8 {
		limits = append(limits, 2)
	}
	sharedLaneRates(t, limits, 1)
}
