package delivery_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestBreakerOpensAndIsShared(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fake    fakethirdparty.Config
		timeout time.Duration // the client's
	}{
		{"503", fakethirdparty.Config{FailureRate: 1}, 0},
		// Hostile: answers slower than the client waits.
		{"slow answers", fakethirdparty.Config{Latency: 300 * time.Millisecond}, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.fake, "")
			if tt.timeout > 0 {
				c, err := thirdparty.New(&thirdparty.Config{URL: b.url, Timeout: tt.timeout})
				require.NoError(t, err)
				t.Cleanup(c.Close)
				b.client = c
			}
			db := newDatabase(t)
			logs := &recorder{}
			cfg := &delivery.Config{
				BreakerFailures: 3, BreakerOpenTimeout: 2 * time.Second,
				BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, Logger: slog.New(logs),
			}
			d := b.deliverer(t, db.shared(t), cfg)

			out, err := d.Deliver(t.Context(), batch("", items(1, 2, nil)))
			require.Nil(t, out)
			var we *delivery.WaitError
			require.ErrorAs(t, err, &we)
			require.ErrorIs(t, err, delivery.ErrBreakerOpen)
			require.InDelta(t, 2*time.Second, we.RetryAfter(), float64(300*time.Millisecond))
			require.Len(t, b.fake.Requests(), 3)
			require.Empty(t, b.fake.Deliveries())
			// The opening is said once, at warn, with the cause.
			const opened = "delivery: circuit breaker opened: the third party keeps failing; nothing is sent until a probe"
			require.Equal(t, 1, logs.countMsgLevel(opened, slog.LevelWarn))
			require.NotEmpty(t, logs.attr(opened, "last_error").String())

			// status reads it through breakerstore.
			st := db.state(t)
			require.Equal(t, gobreaker.StateOpen, st.Breaker.Current(time.Now()))
			require.WithinDuration(t, time.Now().Add(2*time.Second), st.Breaker.Expiry, 500*time.Millisecond)

			// A Deliverer of another daemon inherits the open breaker and
			// sends nothing before its expiry.
			d2 := b.deliverer(t, db.shared(t), cfg)
			_, err = d2.Deliver(t.Context(), batch("", items(1, 2, nil)))
			require.ErrorIs(t, err, delivery.ErrBreakerOpen)
			require.Len(t, b.fake.Requests(), 3)

			// After the expiry a request goes; it succeeds, and the shared
			// state reads closed.
			b.fake.SetConfig(fakethirdparty.Config{})
			require.Eventually(t, func() bool {
				out, err := d2.Deliver(t.Context(), batch("", items(1, 2, nil)))
				if err != nil {
					require.ErrorIs(t, err, delivery.ErrBreakerOpen)
					return false
				}
				requireOnlyAccepted(t, b.fake, out.Accepted)
				return len(out.Accepted) == 2
			}, 10*time.Second, 100*time.Millisecond)
			require.Eventually(t, func() bool {
				_, err := d2.Deliver(t.Context(), batch("", items(1, 2, nil)))
				require.NoError(t, err)
				return db.state(t).Breaker.Current(time.Now()) == gobreaker.StateClosed
			}, 10*time.Second, 100*time.Millisecond)
		})
	}
}

// The breaker, shared by concurrent requests, opens once and then sends
// nothing, whichever goroutine tripped it.
func TestBreakerSharedByConcurrentRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1, Latency: 20 * time.Millisecond}, "")
	db := newDatabase(t)
	d := b.deliverer(t, db.shared(t), &delivery.Config{
		BreakerFailures: 4, BreakerOpenTimeout: time.Minute, MaxInFlight: 4,
		BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
	})
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := d.Deliver(t.Context(), batch("", items(i*10+1, 2, nil)))
			errs <- err
		}()
	}
	for range 8 {
		require.ErrorIs(t, <-errs, delivery.ErrBreakerOpen)
	}
	// Four failures trip it; requests already in flight then may add up to
	// three more, and none goes after.
	n := len(b.fake.Requests())
	require.GreaterOrEqual(t, n, 4)
	require.LessOrEqual(t, n, 4+3)
	_, err := d.Deliver(t.Context(), batch("", items(100, 1, nil)))
	require.ErrorIs(t, err, delivery.ErrBreakerOpen)
	require.Len(t, b.fake.Requests(), n)
	require.Equal(t, gobreaker.StateOpen, db.state(t).Breaker.State)
	require.Empty(t, b.fake.Deliveries())
}

func TestCredentialsRefusedThenAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Token: "right"}, "wrong")
	db := newDatabase(t)
	m := metrics.New(prometheus.NewRegistry())
	d := b.deliverer(t, db.shared(t), &delivery.Config{AuthProbeInterval: 300 * time.Millisecond, BreakerFailures: 1, Metrics: m.Destination(metrics.DefaultDestination)})

	for range 2 {
		out, err := d.Deliver(t.Context(), batch("", items(1, 2, nil)))
		require.Nil(t, out)
		var we *delivery.WaitError
		require.ErrorAs(t, err, &we)
		require.ErrorIs(t, err, delivery.ErrCredentials)
		require.LessOrEqual(t, we.RetryAfter(), 300*time.Millisecond)
		require.NotContains(t, err.Error(), "right")
	}
	require.Len(t, b.fake.Requests(), 1, "no request until the probe time")
	st := db.state(t)
	require.True(t, st.Credentials.Refused)
	require.Equal(t, 401, st.Credentials.Status)
	require.Contains(t, st.Credentials.Message, "401")
	require.False(t, st.Credentials.Since.IsZero())
	require.Equal(t, gobreaker.StateClosed, st.Breaker.State, "401s do not trip the breaker")
	require.InDelta(t, 1, testutil.ToFloat64(m.CredentialsRefused.WithLabelValues(metrics.DefaultDestination)), 0)
	require.Empty(t, b.fake.Deliveries())

	b.fake.SetConfig(fakethirdparty.Config{Token: "wrong"})
	require.Eventually(t, func() bool {
		out, err := d.Deliver(t.Context(), batch("", items(1, 2, nil)))
		if err != nil {
			require.ErrorIs(t, err, delivery.ErrCredentials)
			return false
		}
		return len(out.Accepted) == 2
	}, 5*time.Second, 50*time.Millisecond)
	require.False(t, db.state(t).Credentials.Refused)
	require.Zero(t, testutil.ToFloat64(m.CredentialsRefused.WithLabelValues(metrics.DefaultDestination)))
}

func TestLogsCredentialTransitionsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Token: "right"}, "wrong")
	logs := &recorder{}
	d := b.deliverer(t, nil, &delivery.Config{Logger: slog.New(logs), AuthProbeInterval: 20 * time.Millisecond})
	for range 3 {
		_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
		require.ErrorIs(t, err, delivery.ErrCredentials)
	}
	b.fake.SetConfig(fakethirdparty.Config{})
	require.Eventually(t, func() bool {
		_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
	for i := range 3 {
		_, err := d.Deliver(t.Context(), batch("", items(i+1, 1, nil)))
		require.NoError(t, err)
	}
	require.Equal(t, 1, logs.count(slog.LevelError))
	require.Equal(t, 1, logs.countMsg("delivery: the third party accepts the credentials again"))
}

// retryAfterServer answers every request 429 with Retry-After value, and
// counts them.
func retryAfterServer(t *testing.T, value func() string) (*thirdparty.Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	client := hostile(t, func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", value())
		w.WriteHeader(http.StatusTooManyRequests)
	})
	return client, &n
}

// A pause one daemon was asked for holds for another daemon on the same
// database, which sends nothing before it ends.
func TestPauseSharedAcrossDaemons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		retryAfter func() string
		want       time.Duration
	}{
		{"seconds", func() string { return "60" }, time.Minute},
		// Hostile: an HTTP date, a minute ahead.
		{"date", func() string { return time.Now().Add(time.Minute).UTC().Format(http.TimeFormat) }, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client, n := retryAfterServer(t, tt.retryAfter)
			db := newDatabase(t)
			d1 := newDeliverer(t, client, db.shared(t), nil)
			_, err := d1.Deliver(t.Context(), batch("", items(1, 1, nil)))
			var we *delivery.WaitError
			require.ErrorAs(t, err, &we)
			require.ErrorIs(t, err, delivery.ErrPaused)
			require.InDelta(t, tt.want, we.RetryAfter(), float64(2*time.Second))
			require.EqualValues(t, 1, n.Load())

			st := db.state(t)
			require.True(t, st.Pause.Active(time.Now()))
			require.Contains(t, st.Pause.Cause, "Retry-After")
			require.Equal(t, 429, st.Pause.Status)

			// A fresh process reads the pause before sending.
			d2 := newDeliverer(t, client, db.shared(t), nil)
			_, err = d2.Deliver(t.Context(), batch("", items(2, 1, nil)))
			require.ErrorAs(t, err, &we)
			require.ErrorIs(t, err, delivery.ErrPaused)
			require.InDelta(t, tt.want, we.RetryAfter(), float64(2*time.Second))
			require.EqualValues(t, 1, n.Load(), "the second daemon sent nothing")
		})
	}
}

func TestRetryAfterCapped(t *testing.T) {
	t.Parallel()
	for _, value := range []string{"999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		t.Run(value, func(t *testing.T) {
			t.Parallel()
			client, n := retryAfterServer(t, func() string { return value })
			db := newDatabase(t)
			logs := &recorder{}
			d := newDeliverer(t, client, db.shared(t), &delivery.Config{MaxRetryAfter: 2 * time.Minute, Logger: slog.New(logs)})
			_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
			var we *delivery.WaitError
			require.ErrorAs(t, err, &we)
			require.ErrorIs(t, err, delivery.ErrPaused)
			require.LessOrEqual(t, we.RetryAfter(), 2*time.Minute)
			require.Greater(t, we.RetryAfter(), 2*time.Minute-5*time.Second)
			require.EqualValues(t, 1, n.Load())
			const capped = "delivery: the third party asked for a pause longer than MaxRetryAfter; pausing for MaxRetryAfter only"
			require.Equal(t, 1, logs.countMsgLevel(capped, slog.LevelWarn))
			require.Equal(t, value, logs.attr(capped, "retry_after").String(), "the raw value is logged")
			require.WithinDuration(t, time.Now().Add(2*time.Minute), db.state(t).Pause.Until, 5*time.Second)
		})
	}
}

// The learnt rate outlives the daemon that learnt it.
func TestLearntRateSurvivesHandover(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{UnannouncedLimit: 20}, "")
	db := newDatabase(t)
	d1 := b.deliverer(t, db.shared(t), nil)
	accepted := deliverAll(t, d1, 4, 80, 2)
	require.Len(t, accepted, 160)
	requireOnlyAccepted(t, b.fake, accepted)
	require.Positive(t, b.fake.Stats().RequestsByStatus["429"], "the limit was met")

	st := db.state(t)
	require.Positive(t, st.Rate.Limit, "a rate was learnt and recorded")
	require.Less(t, st.Rate.Limit, 60.0)

	logs := &recorder{}
	m := metrics.New(prometheus.NewRegistry())
	d2 := b.deliverer(t, db.shared(t), &delivery.Config{Logger: slog.New(logs), Metrics: m.Destination(metrics.DefaultDestination)})
	_, err := d2.Deliver(t.Context(), batch("", items(1000, 1, nil)))
	require.NoError(t, err)
	require.Equal(t, 1, logs.countMsg("delivery: request rate taken over from the shared state"))
	require.Positive(t, testutil.ToFloat64(m.RateLimitCurrent.WithLabelValues(metrics.DefaultDestination)))
}

// The last error is recorded for status: bounded, escaped, token-free.
func TestLastErrorRecorded(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	url := hostileURL(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = fmt.Fprintf(w, "upstream said: Bearer %s\n2024-01-01 INFO forged line\x1b[31m%s", token, strings.Repeat("x", 1<<20))
	})
	client := newClient(t, url, token)
	db := newDatabase(t)
	logs := &recorder{}
	d := newDeliverer(t, client, db.shared(t), &delivery.Config{
		BreakerFailures: 1000, BackoffInitial: 5 * time.Millisecond, BackoffMax: 10 * time.Millisecond,
		MaxElapsed: 100 * time.Millisecond, Logger: slog.New(logs),
	})
	_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
	require.ErrorIs(t, err, delivery.ErrGaveUp)

	st := db.state(t)
	require.Equal(t, 502, st.LastError.Status)
	require.WithinDuration(t, time.Now(), st.LastError.At, time.Minute)
	require.Contains(t, st.LastError.Text, "502")
	require.Contains(t, st.LastError.Text, "forged line")
	require.NotContains(t, st.LastError.Text, token)
	require.NotContains(t, st.LastError.Text, "\n")
	require.NotContains(t, st.LastError.Text, "\x1b")
	require.Less(t, len(st.LastError.Text), 4<<10)
	require.NotContains(t, logs.text(), token)
	require.NotContains(t, err.Error(), token)
	// One warn for a run of the same failure.
	require.Equal(t, 1, logs.countMsgLevel("delivery: the third party failed; retrying with backoff", slog.LevelWarn))
}
