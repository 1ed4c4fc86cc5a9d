package delivery_test

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// A redirect, a 404 or a 410 is a configuration error: nothing is accepted
// or rejected, nothing is sent until the probe time, the state is shared
// and said once; once the URL answers, pushing resumes.
func TestConfigurationErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
	}{
		{"301", http.StatusMovedPermanently}, {"302", http.StatusFound}, {"303", http.StatusSeeOther},
		{"307", http.StatusTemporaryRedirect}, {"308", http.StatusPermanentRedirect},
		{"404", http.StatusNotFound}, {"410", http.StatusGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var status atomic.Int64
			status.Store(int64(tt.status))
			var requests atomic.Int64
			fake := fakethirdparty.New(fakethirdparty.Config{})
			t.Cleanup(fake.Close)
			url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if s := int(status.Load()); s != 0 {
					w.Header().Set("Location", "http://elsewhere.example/v1/batches?api_key=leak")
					w.WriteHeader(s)
					_, _ = w.Write([]byte("<html>moved</html>"))
					return
				}
				fake.ServeHTTP(w, r)
			})
			db := newDatabase(t)
			logs := &recorder{}
			m := metrics.New(prometheus.NewRegistry())
			d := newDeliverer(t, newClient(t, url, "tok"), db.shared(t), &delivery.Config{
				AuthProbeInterval: 300 * time.Millisecond, BreakerFailures: 1, Logger: slog.New(logs), Metrics: m.Destination(metrics.DefaultDestination),
			})
			for range 3 {
				out, err := d.Deliver(t.Context(), batch("", items(1, 4, nil)))
				require.Nil(t, out, "nothing accepted, nothing rejected")
				var we *delivery.WaitError
				require.ErrorAs(t, err, &we)
				require.ErrorIs(t, err, delivery.ErrConfiguration)
				require.LessOrEqual(t, we.RetryAfter(), 300*time.Millisecond)
			}
			require.EqualValues(t, 1, requests.Load(), "one request, no retry, until the probe time")
			require.Equal(t, 1, logs.count(slog.LevelError), "said once")
			require.NotContains(t, logs.text(), "leak")
			require.InDelta(t, 1, testutil.ToFloat64(m.Misconfigured.WithLabelValues(metrics.DefaultDestination)), 0)
			require.InDelta(t, 1, testutil.ToFloat64(m.ThirdpartyResponses.WithLabelValues(metrics.DefaultDestination, metrics.ResponseCode(tt.status))), 0)
			st := db.state(t)
			require.True(t, st.Configuration.Refused)
			require.Equal(t, tt.status, st.Configuration.Status)
			require.NotContains(t, st.Configuration.Message, "leak")
			require.False(t, st.Credentials.Refused)

			// Fixed: the next probe goes through and the state clears.
			status.Store(0)
			require.Eventually(t, func() bool {
				out, err := d.Deliver(t.Context(), batch("", items(1, 4, nil)))
				if err != nil {
					require.ErrorIs(t, err, delivery.ErrConfiguration)
					return false
				}
				requireOnlyAccepted(t, fake, out.Accepted)
				return len(out.Accepted) == 4
			}, 5*time.Second, 50*time.Millisecond)
			require.False(t, db.state(t).Configuration.Refused)
			require.Zero(t, testutil.ToFloat64(m.Misconfigured.WithLabelValues(metrics.DefaultDestination)))
			require.Equal(t, 1, logs.countMsg("delivery: the third party accepts the URL again"))
		})
	}
}

// The fake's redirect knob: nothing follows it, nothing is accepted.
func TestRedirectFromTheFake(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Redirect: http.StatusSeeOther}, "tok")
	d := b.deliverer(t, nil, nil)
	_, err := d.Deliver(t.Context(), batch("", items(1, 100, nil)))
	require.ErrorIs(t, err, delivery.ErrConfiguration)
	require.Len(t, b.fake.Requests(), 1, "the redirect was not followed")
	require.Empty(t, b.fake.Deliveries())
}

// A 2xx whose body is not an answer accepts nothing: the batch is retried
// under the same key with the same body, and only a real answer accepts it.
func TestBadAnswersRetriedUnderTheSameKey(t *testing.T) {
	t.Parallel()
	for _, kind := range fakethirdparty.BadAnswers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{BadAnswer: kind}, "")
			logs := &recorder{}
			m := metrics.New(prometheus.NewRegistry())
			d := b.deliverer(t, nil, &delivery.Config{
				BreakerFailures: 1000, BackoffInitial: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond,
				MaxElapsed: 150 * time.Millisecond, Logger: slog.New(logs), Metrics: m.Destination(metrics.DefaultDestination),
			})
			its := items(1, 5, nil)
			out, err := d.Deliver(t.Context(), batch("", its))
			if kind == fakethirdparty.BadAnswerEmpty {
				// The contract makes an empty 2xx body an acceptance.
				require.NoError(t, err)
				require.Len(t, out.Accepted, 5)
				requireOnlyAccepted(t, b.fake, out.Accepted)
				return
			}
			require.Nil(t, out)
			require.ErrorIs(t, err, delivery.ErrGaveUp)
			var tpErr *thirdparty.Error
			require.ErrorAs(t, err, &tpErr)
			// Reading 16 MiB may outlast the client's timeout under -race:
			// a timeout is as good, so long as nothing is accepted.
			require.True(t, tpErr.BadAnswer != "" || (kind == fakethirdparty.BadAnswerHuge && tpErr.Timeout), "%v", err)
			reqs := b.fake.Requests()
			require.NotEmpty(t, reqs)
			if kind != fakethirdparty.BadAnswerHuge {
				require.Greater(t, len(reqs), 1, "retried")
			}
			for _, r := range reqs {
				require.Equal(t, bodyKey("", its), r.Key)
			}
			require.Empty(t, b.fake.Deliveries())
			const msg = "delivery: the third party answered 2xx with a body that is not an answer; nothing is taken as accepted, retrying under the same key"
			if tpErr.BadAnswer != "" {
				require.Equal(t, 1, logs.countMsgLevel(msg, slog.LevelWarn))
			}
			require.Zero(t, testutil.ToFloat64(m.LastSuccessTime.WithLabelValues(metrics.DefaultDestination)))

			// The third party comes to its senses: the same key is accepted.
			b.fake.SetConfig(fakethirdparty.Config{})
			out, err = d.Deliver(t.Context(), batch("", its))
			require.NoError(t, err)
			require.Len(t, out.Accepted, 5)
			requireOnlyAccepted(t, b.fake, out.Accepted)
			for _, r := range b.fake.Requests() {
				require.Equal(t, bodyKey("", its), r.Key)
			}
			require.Positive(t, testutil.ToFloat64(m.LastSuccessTime.WithLabelValues(metrics.DefaultDestination)))
		})
	}
}
