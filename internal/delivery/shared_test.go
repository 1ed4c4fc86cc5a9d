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

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
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

// A successor inherits its predecessor's breaker as it stands (issue 22):
// nothing while the open period lasts, then exactly one probe, never a
// fresh count of failures; a failed probe opens it again, as stored for
// the next successor.
func TestBreakerInheritedBySuccessor(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1}, "")
	db := newDatabase(t)
	fast := delivery.Config{BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond}
	cfg1 := fast
	cfg1.BreakerFailures, cfg1.BreakerOpenTimeout = 3, time.Second
	d1 := b.deliverer(t, db.shared(t), &cfg1)
	_, err := d1.Deliver(t.Context(), batch("", items(1, 2, nil)))
	require.ErrorIs(t, err, delivery.ErrBreakerOpen)
	require.Len(t, b.fake.Requests(), 3)

	// The successor starts within the open period: it sends nothing.
	logs := &recorder{}
	m := metrics.New(prometheus.NewRegistry())
	cfg2 := fast
	cfg2.BreakerFailures, cfg2.BreakerOpenTimeout, cfg2.Logger, cfg2.Metrics = 5, 2*time.Second, slog.New(logs), m.Destination(metrics.DefaultDestination)
	d2 := b.deliverer(t, db.shared(t), &cfg2)
	_, err = d2.Deliver(t.Context(), batch("", items(1, 2, nil)))
	var we *delivery.WaitError
	require.ErrorAs(t, err, &we)
	require.ErrorIs(t, err, delivery.ErrBreakerOpen)
	require.LessOrEqual(t, we.RetryAfter(), time.Second)
	require.Len(t, b.fake.Requests(), 3)
	require.Equal(t, 1, logs.countMsgLevel("delivery: circuit breaker taken over from the shared state: nothing is sent before its open period ends, then one probe", slog.LevelWarn))
	require.InDelta(t, float64(gobreaker.StateOpen), testutil.ToFloat64(m.BreakerState.WithLabelValues(metrics.DefaultDestination)), 0)

	// Past it: one probe, which fails and opens it for the successor's
	// own period; not five failures counted afresh.
	require.Eventually(t, func() bool {
		_, err := d2.Deliver(t.Context(), batch("", items(1, 2, nil)))
		require.ErrorAs(t, err, &we)
		return we.RetryAfter() > time.Second
	}, 5*time.Second, 50*time.Millisecond)
	require.Len(t, b.fake.Requests(), 4, "exactly one probe")
	const opened = "delivery: circuit breaker opened: the third party keeps failing; nothing is sent until a probe"
	require.Equal(t, 1, logs.countMsgLevel(opened, slog.LevelWarn))
	require.Contains(t, logs.attr(opened, "last_error").String(), "503", "the cause is named")
	st := db.state(t)
	require.Equal(t, gobreaker.StateOpen, st.Breaker.State)
	require.WithinDuration(t, time.Now().Add(2*time.Second), st.Breaker.Expiry, time.Second)

	// The third party answers again; the next successor, past that open
	// period, probes once and closes the breaker.
	b.fake.SetConfig(fakethirdparty.Config{})
	d3 := b.deliverer(t, db.shared(t), &cfg2)
	require.Eventually(t, func() bool {
		out, err := d3.Deliver(t.Context(), batch("", items(1, 2, nil)))
		if err != nil {
			require.ErrorIs(t, err, delivery.ErrBreakerOpen)
			return false
		}
		return len(out.Accepted) == 2
	}, 5*time.Second, 50*time.Millisecond)
	require.Len(t, b.fake.Requests(), 5)
	require.Equal(t, gobreaker.StateClosed, db.state(t).Breaker.State)
}

// Each destination learns and keeps its own facts (issue 22): the daemon
// gives each destination's Deliverer a store under the destination's
// namespace. One destination limited, one down: the limited one's rate and
// the other's open breaker are each stored under their own namespace only.
func TestFactsPerDestination(t *testing.T) {
	t.Parallel()
	limited := setup(t, fakethirdparty.Config{UnannouncedLimit: 20, UnannouncedBurst: 2}, "")
	down := setup(t, fakethirdparty.Config{FailureRate: 1}, "")
	db := newDatabase(t)
	store := func(ns string) *breakerstore.Shared {
		s, err := breakerstore.New(db.newPool(t), &breakerstore.Config{Namespace: ns})
		require.NoError(t, err)
		return breakerstore.NewShared(s, 0)
	}
	dl := limited.deliverer(t, store("destination:search"), nil)
	dd := down.deliverer(t, store("destination:crm"), &delivery.Config{
		BreakerFailures: 3, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond,
	})
	accepted := deliverAll(t, dl, 4, 60, 2)
	require.Len(t, accepted, 120)
	_, err := dd.Deliver(t.Context(), batch("", items(1, 2, nil)))
	require.ErrorIs(t, err, delivery.ErrBreakerOpen)

	read := func(ns string) breakerstore.State {
		st, err := breakerstore.ReadStateOf(t.Context(), db.pool, ns)
		require.NoError(t, err)
		return st
	}
	search, crm, none := read("destination:search"), read("destination:crm"), read("")
	require.Positive(t, search.Rate.Limit, "the limited destination learnt a rate")
	require.NotEmpty(t, search.Rate.Phase)
	require.Equal(t, gobreaker.StateClosed, search.Breaker.State)
	require.Zero(t, crm.Rate.Limit, "the other learnt nothing of it")
	require.Equal(t, gobreaker.StateOpen, crm.Breaker.State)
	require.Equal(t, 503, crm.LastError.Status)
	require.Equal(t, breakerstore.State{}, none, "nothing under the resources' own keys")
}

// Issue 54 point 15: a `syncer verify` from the command line records its
// share of the destination's rate in the shared facts; the deliverer sends
// at the rest while the share's lease holds, and at the whole rate again
// once it is given back.
func TestYieldsTheVerifysShare(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	db := newDatabase(t)
	s, err := breakerstore.New(db.newPool(t), &breakerstore.Config{Namespace: "destination:crm"})
	require.NoError(t, err)
	require.NoError(t, s.SetVerifyShare(t.Context(), breakerstore.VerifyShare{Share: 0.25, Until: time.Now().Add(time.Minute)}))
	m := metrics.New(prometheus.NewRegistry())
	d := b.deliverer(t, breakerstore.NewShared(s, 0), &delivery.Config{RateLimit: 40, Metrics: m.Destination("crm")})
	limit := func() float64 {
		_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
		require.NoError(t, err)
		return testutil.ToFloat64(m.RateLimitCurrent.WithLabelValues("crm"))
	}
	require.Equal(t, 30.0, limit(), "three quarters of 40 while the verify takes a quarter")
	require.NoError(t, s.SetVerifyShare(t.Context(), breakerstore.VerifyShare{}))
	require.Eventually(t, func() bool { return limit() == 40 }, 10*time.Second, 100*time.Millisecond, "the whole rate once given back")
}
