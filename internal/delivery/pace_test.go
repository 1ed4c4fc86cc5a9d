package delivery_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// A limit the third party keeps to itself (bare 429s) is learnt: after the
// first overshoot few requests are refused. Counts only; the rates are
// BenchmarkUnannouncedLimit's.
func TestLearnsUnannouncedLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fake    fakethirdparty.Config
		batches int
		// most is the share of requests answered 429 allowed: the first
		// overshoot (the third party's burst lets the start run faster than
		// its rate) weighs more in a short run with slow answers.
		most float64
	}{
		{"fast answers", fakethirdparty.Config{UnannouncedLimit: 50}, 200, 0.15},
		// Hostile: 100 ms answers, so four requests in flight are all
		// answered 429 at once.
		{"slow answers", fakethirdparty.Config{UnannouncedLimit: 20, Latency: 100 * time.Millisecond}, 80, 0.35},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.fake, "")
			logs := &recorder{}
			m := metrics.New(prometheus.NewRegistry())
			d := b.deliverer(t, nil, &delivery.Config{Metrics: m.Destination(metrics.DefaultDestination), Logger: slog.New(logs)})
			accepted := deliverAll(t, d, 4, tt.batches, 3)
			require.Len(t, accepted, tt.batches*3)
			requireOnlyAccepted(t, b.fake, accepted)

			st := b.fake.Stats()
			limited := st.RequestsByStatus["429"]
			t.Logf("%d of %d requests answered 429", limited, st.Requests)
			require.Positive(t, limited, "the limit was met")
			require.LessOrEqual(t, float64(limited), tt.most*float64(st.Requests), "the limit was learnt: %d of %d requests refused", limited, st.Requests)
			rate := testutil.ToFloat64(m.RateLimitCurrent.WithLabelValues(metrics.DefaultDestination))
			require.Positive(t, rate)
			require.Less(t, rate, 2*tt.fake.UnannouncedLimit)
			require.InDelta(t, float64(limited), testutil.ToFloat64(m.RateLimited.WithLabelValues(metrics.DefaultDestination)), 0)
			// From unlimited to a rate: slow start, or the limit found at once.
			require.GreaterOrEqual(t, logs.countMsg("delivery: request rate changed by more than half")+
				logs.countMsg("delivery: the third party's unannounced limit found; holding near it and probing past it"), 1, "from unlimited to a rate")
		})
	}
}

// The learnt rate never exceeds the configured one.
func TestLearntRateBelowTheConfiguredOne(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{UnannouncedLimit: 1000}, "")
	m := metrics.New(prometheus.NewRegistry())
	d := b.deliverer(t, nil, &delivery.Config{Metrics: m.Destination(metrics.DefaultDestination), RateLimit: 30})
	accepted := deliverAll(t, d, 4, 40, 1)
	require.Len(t, accepted, 40)
	require.InDelta(t, 30, testutil.ToFloat64(m.RateLimitCurrent.WithLabelValues(metrics.DefaultDestination)), 0)
	require.LessOrEqual(t, b.fake.Stats().MaxRequestsInOneSecond, int64(31))
}

// An advertised quota is spread over its window and never overrun.
func TestQuotaHonoured(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fake fakethirdparty.Config
	}{
		{"RateLimit headers", fakethirdparty.Config{Quota: 10, QuotaWindow: time.Second}},
		{"X-RateLimit headers too", fakethirdparty.Config{Quota: 10, QuotaWindow: time.Second, QuotaXHeaders: true}},
		// Hostile: 100 ms answers, so answers lag what is in flight.
		{"slow answers", fakethirdparty.Config{Quota: 10, QuotaWindow: time.Second, Latency: 100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.fake, "")
			d := b.deliverer(t, nil, nil)
			accepted := deliverAll(t, d, 4, 35, 2)
			require.Len(t, accepted, 70)
			requireOnlyAccepted(t, b.fake, accepted)
			require.LessOrEqual(t, b.fake.Stats().OverQuota, int64(2))
		})
	}
}
