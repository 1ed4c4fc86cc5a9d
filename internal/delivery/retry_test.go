package delivery_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestRateLimitedInline(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RateLimit: 0.5, RateBurst: 1, RetryAfter: time.Second}, "")
	d := b.deliverer(t, nil, nil)

	for i := range 2 {
		out, err := d.Deliver(t.Context(), batch("", items(i+1, 1, nil)))
		require.NoError(t, err)
		requireOnlyAccepted(t, b.fake, out.Accepted)
	}
	reqs := b.fake.Requests()
	require.GreaterOrEqual(t, len(reqs), 3)
	for i, r := range reqs {
		if r.Status == 429 {
			require.Less(t, i+1, len(reqs))
			gap := reqs[i+1].At.Sub(r.At)
			require.GreaterOrEqual(t, gap, 990*time.Millisecond, "request %d came %s after a 429 asking for 1s", i+1, gap)
		}
	}
}

func TestRateLimitedLongWaitIsReturned(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RateLimit: 0.1, RateBurst: 1, RetryAfter: 3 * time.Second}, "")
	d := b.deliverer(t, nil, &delivery.Config{MaxInlineWait: 500 * time.Millisecond, BreakerFailures: 1})

	_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
	require.NoError(t, err)
	_, err = d.Deliver(t.Context(), batch("", items(2, 1, nil)))
	var we *delivery.WaitError
	require.ErrorAs(t, err, &we)
	require.ErrorIs(t, err, delivery.ErrPaused)
	require.InDelta(t, 3*time.Second, we.RetryAfter(), float64(200*time.Millisecond))
	var tpErr *thirdparty.Error
	require.ErrorAs(t, err, &tpErr)
	require.True(t, tpErr.RateLimited())

	// Until the pause ends, nothing is sent at all, and the 429 did not
	// count against the breaker (one failure would have opened it).
	_, err = d.Deliver(t.Context(), batch("", items(3, 1, nil)))
	require.ErrorAs(t, err, &we)
	require.ErrorIs(t, err, delivery.ErrPaused)
	require.ErrorAs(t, err, &tpErr)
	require.Len(t, b.fake.Requests(), 2)
}

func TestRateLimiterPaces(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	d := b.deliverer(t, nil, &delivery.Config{RateLimit: 40, RateBurst: 1})

	start := time.Now()
	var wg sync.WaitGroup
	for i := range 21 {
		wg.Go(func() {
			_, err := d.Deliver(t.Context(), batch("", items(i+1, 1, nil)))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.GreaterOrEqual(t, time.Since(start), 490*time.Millisecond, "21 requests at 40/s, however many goroutines")
	require.LessOrEqual(t, b.fake.Stats().MaxRequestsInOneSecond, int64(41))
}

func TestGivesUpAfterMaxElapsed(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1}, "")
	d := b.deliverer(t, nil, &delivery.Config{
		BreakerFailures: 1000, BackoffInitial: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		MaxElapsed: 300 * time.Millisecond, GaveUpSnooze: 7 * time.Second,
	})
	its := items(1, 3, nil)
	_, err := d.Deliver(t.Context(), batch("", its))
	var we *delivery.WaitError
	require.ErrorAs(t, err, &we)
	require.ErrorIs(t, err, delivery.ErrGaveUp)
	require.Equal(t, 7*time.Second, we.RetryAfter())
	reqs := b.fake.Requests()
	require.Greater(t, len(reqs), 2)
	for _, r := range reqs {
		require.Equal(t, bodyKey("", its), r.Key, "every retry under the same key")
	}
	require.Empty(t, b.fake.Deliveries())
}

func TestContextEndsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1}, "")
	d := b.deliverer(t, nil, &delivery.Config{BreakerFailures: 1000, BackoffInitial: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := d.Deliver(ctx, batch("", items(1, 1, nil)))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
