package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

// insertPayloads adds one row for each payload, in order, and returns ids.
func (b *bundle) insertPayloads(t *testing.T, payloads []string) []int64 {
	t.Helper()
	ids := make([]int64, len(payloads))
	for i, p := range payloads {
		require.NoError(t, b.pool.QueryRow(context.Background(),
			`INSERT INTO resources (payload) VALUES ($1) RETURNING id`, p).Scan(&ids[i]))
	}
	return ids
}

// retryFailed does what `syncer retry-failed` does.
// retryFailed runs `syncer retry-failed` (no --id: every failed row) as a
// user would, and returns how many rows it made eligible.
func (b *bundle) retryFailed(t *testing.T) int64 {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), []string{"retry-failed", "--database-url", b.dsn, "--log-level", "error"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	var n int64
	_, err := fmt.Sscanf(out.String(), "%d failed ", &n)
	require.NoError(t, err, out.String())
	return n
}

func requestsBetween(reqs []fakethirdparty.Request, from, to time.Time) []fakethirdparty.Request {
	var out []fakethirdparty.Request
	for _, r := range reqs {
		if !r.At.Before(from) && r.At.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// maxInWindow is the most requests that arrived within any window of d.
func maxInWindow(reqs []fakethirdparty.Request, d time.Duration) int {
	at := make([]time.Time, len(reqs))
	for i, r := range reqs {
		at[i] = r.At
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	best, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func TestPushPathFlakyThirdPartyAndOutage(t *testing.T) {
	t.Parallel()
	const openTimeout = 3 * time.Second
	b := setup(t, fakethirdparty.Config{FailureRate: 0.3, Seed: 7})
	b.startDaemon(t, func(c *daemon.Config) {
		c.Exporter.BatchSize = 10
		c.Delivery.BreakerFailures = 5
		c.Delivery.BreakerOpenTimeout = openTimeout
	})

	b.insert(t, 300, 2)
	b.waitDrained(t, 60*time.Second)

	outageStart := time.Now()
	b.fake.Outage(10 * time.Second)
	outageEnd := outageStart.Add(10 * time.Second)
	b.insert(t, 300, 2)
	r := b.waitDrained(t, 90*time.Second)

	require.EqualValues(t, 600, r.Synced)
	require.Zero(t, r.Failed)
	st := b.fake.Stats()
	require.EqualValues(t, 600, st.DistinctPairs)
	require.Zero(t, st.DuplicatesOtherKey)

	// During the outage every request fails. The first few trip the
	// breaker (retries of one batch, close together); after that only a
	// probe each open timeout may reach the third party.
	during := requestsBetween(b.fake.Requests(), outageStart, outageEnd)
	require.NotEmpty(t, during)
	tripped := len(during)
	for i := 1; i < len(during); i++ {
		if during[i].At.Sub(during[i-1].At) >= openTimeout-100*time.Millisecond {
			tripped = i
			break
		}
	}
	probes := len(during) - tripped
	t.Logf("outage: %d requests reached the fake, %d before the breaker opened, %d probes while it was open", len(during), tripped, probes)
	// The fifth failure opens it; requests already in flight then (at most
	// MaxInFlight - 1 besides the one that failed) still arrive.
	require.LessOrEqual(t, tripped, 5+delivery.MaxInFlightDefault-1, "the breaker opens after 5 consecutive failures")
	require.LessOrEqual(t, probes, 5)
}

func TestPushPathHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RateLimit: 1, RateBurst: 1, RetryAfter: 2 * time.Second})
	b.startDaemon(t, func(c *daemon.Config) { c.Exporter.BatchSize = 1 })

	b.insert(t, 4, 1)
	r := b.waitDrained(t, 60*time.Second)
	require.EqualValues(t, 4, r.Synced)
	require.Zero(t, r.Failed)

	// Several requests may be in flight: those already on their way when
	// the 429 was answered arrive at once; nothing else may come before
	// the 2 s have passed.
	reqs := b.fake.Requests()
	limited := 0
	for _, req := range reqs {
		if req.Status != 429 {
			continue
		}
		limited++
		during := requestsBetween(reqs, req.At.Add(100*time.Millisecond), req.At.Add(2*time.Second-50*time.Millisecond))
		require.Empty(t, during, "requests sent during the 2 s that followed a 429 with Retry-After: 2 at %s", req.At)
	}
	require.Positive(t, limited, "the fake's limit should have answered 429 at least once")
	t.Logf("%d requests, %d answered 429", len(reqs), limited)
}

func TestPushPathRateLimit(t *testing.T) {
	t.Parallel()
	const limit = 20.0
	b := setup(t, fakethirdparty.Config{})
	b.insert(t, 300, 4)
	b.startDaemon(t, func(c *daemon.Config) {
		c.Exporter.BatchSize = 1
		c.Delivery.RateLimit = limit
		c.Delivery.RateBurst = 1
		// One request at a time, so arrivals at the fake keep the gaps the
		// limiter made; TestPushPathRateLimitWithRequestsInFlight counts
		// with four.
		c.Delivery.MaxInFlight = 1
	})
	r := b.waitDrained(t, 90*time.Second)
	require.EqualValues(t, 300, r.Synced)

	reqs := b.fake.Requests()
	require.GreaterOrEqual(t, len(reqs), 300)
	busiest := maxInWindow(reqs, time.Second)
	span := reqs[len(reqs)-1].At.Sub(reqs[0].At)
	utilisation := float64(len(reqs)-1) / span.Seconds() / limit
	t.Logf("%d requests in %s: %.1f/s, %.0f%% of the limit; busiest second held %d", len(reqs), span.Round(time.Millisecond),
		float64(len(reqs)-1)/span.Seconds(), 100*utilisation, busiest)
	require.LessOrEqual(t, busiest, 21, "limit 20/s with burst 1")
	require.GreaterOrEqual(t, utilisation, 0.85)
}

func TestPushPathRejectedItemsFailThenRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RejectField: "bad"})
	b.startDaemon(t, func(c *daemon.Config) { c.Exporter.BatchSize = 20 })

	payloads := make([]string, 100)
	bad := map[int64]bool{}
	for i := range payloads {
		payloads[i] = fmt.Sprintf(`{"n": %d}`, i)
		if i%10 == 3 {
			payloads[i] = fmt.Sprintf(`{"n": %d, "bad": true}`, i)
		}
	}
	ids := b.insertPayloads(t, payloads)
	for i, id := range ids {
		if i%10 == 3 {
			bad[id] = true
		}
	}
	r := b.waitDrained(t, 60*time.Second)
	require.EqualValues(t, 10, r.Failed)
	require.EqualValues(t, 90, r.Synced)
	require.NotEmpty(t, r.RecentFailures)
	for _, f := range r.RecentFailures {
		require.Equal(t, status.ResourcesSource, f.Source)
		require.True(t, bad[mustID(t, f.ID)], "row %s failed", f.ID)
		require.Equal(t, "field bad is not allowed", f.Error)
	}
	var withError int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM resources
		WHERE failed_at IS NOT NULL AND sync_error = 'field bad is not allowed'`).Scan(&withError))
	require.Equal(t, 10, withError)

	b.fake.SetConfig(fakethirdparty.Config{})
	require.EqualValues(t, 10, b.retryFailed(t))
	waitFor(t, 60*time.Second, "retried rows synced", func() bool {
		r = b.report(t)
		return r.Synced == 100
	})
	require.Zero(t, r.Failed)
	latest := b.fake.Latest()
	for id := range bad {
		require.Contains(t, latest, id)
	}
}

func TestPushPathSplitsRefusedBatches(t *testing.T) {
	t.Parallel()
	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, fakethirdparty.Config{MaxBatchItems: 7})
		b.startDaemon(t, func(c *daemon.Config) { c.Exporter.BatchSize = 50 })
		b.insert(t, 300, 2)
		r := b.waitDrained(t, 60*time.Second)
		require.EqualValues(t, 300, r.Synced)
		require.Zero(t, r.Failed)
		st := b.fake.Stats()
		require.EqualValues(t, 300, st.DistinctPairs)
		require.Zero(t, st.DuplicatePairs)
		require.Zero(t, st.KeyConflicts)
	})
	t.Run("Poison", func(t *testing.T) {
		t.Parallel()
		b := setup(t, fakethirdparty.Config{PoisonField: "poison"})
		b.startDaemon(t, func(c *daemon.Config) { c.Exporter.BatchSize = 50 })
		payloads := make([]string, 120)
		for i := range payloads {
			payloads[i] = fmt.Sprintf(`{"n": %d}`, i)
		}
		payloads[77] = `{"n": 77, "poison": 1}`
		ids := b.insertPayloads(t, payloads)
		r := b.waitDrained(t, 60*time.Second)
		require.EqualValues(t, 119, r.Synced)
		require.EqualValues(t, 1, r.Failed)
		require.Len(t, r.RecentFailures, 1)
		require.Equal(t, ids[77], mustID(t, r.RecentFailures[0].ID))
		require.True(t, strings.HasPrefix(r.RecentFailures[0].Error, "refused as a whole: 400"), r.RecentFailures[0].Error)
		st := b.fake.Stats()
		require.EqualValues(t, 119, st.DistinctPairs)
		require.Zero(t, st.DuplicatePairs)
		require.NotContains(t, b.fake.Latest(), ids[77])
	})
}

func TestPushPathWrongTokenResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Token: "right"})
	b.startDaemon(t, func(c *daemon.Config) {
		c.Exporter.BatchSize = 10
		c.ThirdParty.Token = "wrong"
		c.Delivery.AuthProbeInterval = 300 * time.Millisecond
	})
	b.insert(t, 50, 1)

	waitFor(t, 30*time.Second, "credentials refused in status", func() bool {
		return b.report(t).Credentials.Refused
	})
	r := b.report(t)
	require.Zero(t, r.Failed)
	require.Zero(t, r.Synced)
	require.Equal(t, 401, r.Credentials.Status)
	require.Contains(t, r.Credentials.Message, "401", "the cause, with the status")
	time.Sleep(time.Second) // a few probes, still nothing failed
	require.Zero(t, b.report(t).Failed)

	// The third party now accepts the token the daemon has.
	b.fake.SetConfig(fakethirdparty.Config{Token: "wrong"})
	r = b.waitDrained(t, 30*time.Second)
	require.EqualValues(t, 50, r.Synced)
	require.Zero(t, r.Failed)
	require.False(t, r.Credentials.Refused)
	require.EqualValues(t, 50, b.fake.Stats().DistinctPairs)
}

func TestPushPathRateLimitWithRequestsInFlight(t *testing.T) {
	t.Parallel()
	const limit = 20.0
	b := setup(t, fakethirdparty.Config{Latency: 30 * time.Millisecond})
	b.insert(t, 200, 4)
	b.startDaemon(t, func(c *daemon.Config) {
		c.Exporter.BatchSize = 1
		c.Delivery.RateLimit = limit
		c.Delivery.RateBurst = 1
	})
	r := b.waitDrained(t, 90*time.Second)
	require.EqualValues(t, 200, r.Synced)
	reqs := b.fake.Requests()
	span := reqs[len(reqs)-1].At.Sub(reqs[0].At)
	rate := float64(len(reqs)-1) / span.Seconds()
	t.Logf("%d requests in %s with four in flight: %.1f/s; busiest second at the fake held %d", len(reqs), span.Round(time.Millisecond), rate, maxInWindow(reqs, time.Second))
	// Arrivals of concurrent requests jitter; the average over the run
	// cannot exceed the limiter's.
	require.LessOrEqual(t, rate, limit*1.05)
	require.GreaterOrEqual(t, rate, limit*0.85)
}

// mustID reads a failure's id of resources.
func mustID(t *testing.T, id string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	return n
}
