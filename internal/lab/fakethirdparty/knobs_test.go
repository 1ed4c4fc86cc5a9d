package fakethirdparty_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestRedirectKnob(t *testing.T) {
	t.Parallel()
	for _, status := range []int{301, 302, 303, 307, 308} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{Redirect: status, Token: "tok"}, &thirdparty.Config{Token: "tok"})
			_, err := b.push(t, batch(1, 3, 1, ""))
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, status, e.StatusCode)
			require.Equal(t, fakethirdparty.RedirectLocationDefault, e.Location)
			require.Equal(t, thirdparty.ClassConfig, thirdparty.Classify(err))
			require.Empty(t, b.fake.Deliveries())
			st := b.fake.Stats()
			require.Equal(t, int64(1), st.Requests, "the client followed nothing")
			require.Equal(t, int64(1), st.RequestsByStatus[fmt.Sprint(status)])
		})
	}
	t.Run("location", func(t *testing.T) {
		t.Parallel()
		b := setup(t, fakethirdparty.Config{Redirect: 308, RedirectLocation: "https://elsewhere.example/v1/batches?k=v"}, nil)
		code, h, _ := b.post(t, http.MethodPost, "/v1/batches", nil, "{}")
		require.Equal(t, 308, code)
		require.Equal(t, "https://elsewhere.example/v1/batches?k=v", h.Get("Location"))
	})
}

func TestBadAnswerKnob(t *testing.T) {
	t.Parallel()
	for _, kind := range fakethirdparty.BadAnswers {
		if kind == fakethirdparty.BadAnswerEmpty {
			continue
		}
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{BadAnswer: kind}, nil)
			its := batch(1, 3, 1, "")
			res, err := b.push(t, its)
			require.Nil(t, res)
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, http.StatusOK, e.StatusCode)
			require.NotEmpty(t, e.BadAnswer)
			require.True(t, e.Transient())
			require.Empty(t, b.fake.Deliveries(), "a bad answer stored nothing")
			require.Equal(t, int64(1), b.fake.Stats().BadAnswers)

			// The key was not remembered: a retry under it, once the
			// answers are good again, is processed.
			b.fake.SetConfig(fakethirdparty.Config{Now: b.clock.Now})
			res, err = b.push(t, its)
			require.NoError(t, err)
			require.Empty(t, res.Rejected)
			require.Len(t, b.fake.Deliveries(), 3)
			require.Zero(t, b.fake.Stats().KeyReplays)
		})
	}
	t.Run("empty is an acceptance", func(t *testing.T) {
		t.Parallel()
		b := setup(t, fakethirdparty.Config{BadAnswer: fakethirdparty.BadAnswerEmpty, RejectField: "bad"}, nil)
		code, _, body := b.post(t, http.MethodPost, "/v1/batches", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k"},
			`{"items":[{"id":"1","version":1,"payload":{"bad":1}}]}`)
		require.Equal(t, http.StatusOK, code)
		require.Empty(t, body)
		res, err := b.push(t, batch(2, 2, 1, ""))
		require.NoError(t, err)
		require.Empty(t, res.Rejected)
		require.Len(t, b.fake.Deliveries(), 3)
		require.Zero(t, b.fake.Stats().BadAnswers)
	})
	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, fakethirdparty.Config{BadAnswer: "nonsense"}, nil)
		_, err := b.push(t, batch(1, 1, 1, ""))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, http.StatusInternalServerError, e.StatusCode)
		require.Contains(t, e.Body, "unknown BadAnswer")
	})
}

func TestRetryAfterRawKnob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want func(now time.Time) time.Duration
	}{
		{"999999999", func(time.Time) time.Duration { return 999999999 * time.Second }},
		{"Fri, 31 Dec 9999 23:59:59 GMT", func(now time.Time) time.Duration {
			return time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Sub(now)
		}},
		{"soon", func(time.Time) time.Duration { return 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{RateLimit: 1, RetryAfterRaw: tt.raw}, nil)
			_, err := b.push(t, batch(1, 1, 1, ""))
			require.NoError(t, err)
			_, err = b.push(t, batch(2, 1, 1, ""))
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.True(t, e.RateLimited())
			require.Equal(t, tt.raw, e.RetryAfterRaw)
			require.Equal(t, tt.want(b.clock.Now()), e.RetryAfter)
		})
	}
	t.Run("outage", func(t *testing.T) {
		t.Parallel()
		b := setup(t, fakethirdparty.Config{RetryAfterRaw: "999999999"}, nil)
		b.fake.Outage(time.Minute)
		_, err := b.push(t, batch(1, 1, 1, ""))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, http.StatusServiceUnavailable, e.StatusCode)
		require.Equal(t, "999999999", e.RetryAfterRaw)
	})
}

func TestUnannouncedLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{UnannouncedLimit: 2}, nil)
	for i := range 2 {
		_, err := b.push(t, batch(i+1, 1, 1, ""))
		require.NoError(t, err)
	}
	_, err := b.push(t, batch(3, 1, 1, ""))
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.True(t, e.RateLimited())
	require.Zero(t, e.RetryAfter)
	require.Empty(t, e.RetryAfterRaw)
	require.False(t, e.Quota.Known)
	require.Empty(t, e.Body)

	code, h, body := b.post(t, http.MethodPost, "/v1/batches", nil, "")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Empty(t, body)
	for name := range h {
		require.NotContains(t, []string{"Retry-After", "Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "X-Ratelimit-Remaining"}, name)
	}

	b.clock.Advance(time.Second)
	_, err = b.push(t, batch(3, 1, 1, ""))
	require.NoError(t, err, "the limit refills")
	require.Len(t, b.fake.Deliveries(), 3)
}

// A small burst refuses the third request in a row, however high the rate.
func TestUnannouncedBurst(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{UnannouncedLimit: 20, UnannouncedBurst: 2}, nil)
	for i := range 2 {
		_, err := b.push(t, batch(i+1, 1, 1, ""))
		require.NoError(t, err)
	}
	_, err := b.push(t, batch(3, 1, 1, ""))
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.True(t, e.RateLimited())
	require.Zero(t, e.RetryAfter)

	b.clock.Advance(50 * time.Millisecond) // one request's worth at 20/s
	_, err = b.push(t, batch(3, 1, 1, ""))
	require.NoError(t, err, "the rate refills")
	_, err = b.push(t, batch(4, 1, 1, ""))
	require.ErrorAs(t, err, &e)
}

func TestQuota(t *testing.T) {
	t.Parallel()
	// The stub clock stands at :07 of a minute; 10 s windows end at :10.
	b := setup(t, fakethirdparty.Config{Quota: 3, QuotaWindow: 10 * time.Second, QuotaXHeaders: true}, nil)
	for i := range 3 {
		res, err := b.push(t, batch(i+1, 1, 1, ""))
		require.NoError(t, err)
		require.Equal(t, thirdparty.Quota{Known: true, Limit: 3, Remaining: 2 - i, Reset: 3 * time.Second}, res.Quota)
	}
	for i := range 2 {
		_, err := b.push(t, batch(4, 1, 1, ""))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		require.True(t, e.RateLimited())
		require.Empty(t, e.RetryAfterRaw, "the quota headers say when")
		require.Equal(t, thirdparty.Quota{Known: true, Limit: 3, Remaining: 0, Reset: 3 * time.Second}, e.Quota)
		require.Equal(t, int64(i+1), b.fake.Stats().OverQuota)
	}
	code, h, _ := b.post(t, http.MethodPost, "/v1/batches", nil, "")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, "3", h.Get("X-RateLimit-Limit"))
	require.Equal(t, "0", h.Get("X-RateLimit-Remaining"))
	require.Equal(t, fmt.Sprint(b.clock.Now().Add(3*time.Second).Unix()), h.Get("X-RateLimit-Reset"))
	require.Equal(t, int64(3), b.fake.Stats().OverQuota)

	b.clock.Advance(3 * time.Second)
	res, err := b.push(t, batch(4, 1, 1, ""))
	require.NoError(t, err)
	require.Equal(t, thirdparty.Quota{Known: true, Limit: 3, Remaining: 2, Reset: 10 * time.Second}, res.Quota)
	require.Len(t, b.fake.Deliveries(), 4)
}

func TestInFlightAndOverlappingIDs(t *testing.T) {
	t.Parallel()
	// Requests are held (Latency) until Close, so all four are unanswered at
	// once; the last holds id 2, which the first holds too.
	b := setup(t, fakethirdparty.Config{Latency: time.Hour}, nil)
	batches := [][]thirdparty.Item{batch(1, 2, 1, ""), batch(10, 2, 1, ""), batch(20, 2, 1, ""), batch(2, 1, 2, "")}
	var wg sync.WaitGroup
	for i, its := range batches {
		if i == len(batches)-1 {
			// The overlapping one goes last, so exactly one id overlaps.
			require.Eventually(t, func() bool { return b.fake.Stats().MaxInFlight == 3 }, 10*time.Second, 5*time.Millisecond)
		}
		wg.Go(func() {
			_, err := b.push(t, its)
			if thirdparty.Classify(err) != thirdparty.ClassTransient {
				t.Errorf("held request: %v", err)
			}
		})
	}
	require.Eventually(t, func() bool {
		st := b.fake.Stats()
		return st.MaxInFlight == 4 && st.OverlappingIDs == 1
	}, 10*time.Second, 5*time.Millisecond)
	b.fake.Close() // the held requests are dropped
	wg.Wait()
	require.Empty(t, b.fake.Deliveries())
	require.Equal(t, int64(1), b.fake.Stats().OverlappingIDs)
}

func TestOverlapReleasedOnAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	for v := range int64(3) {
		_, err := b.push(t, batch(1, 2, v+1, ""))
		require.NoError(t, err)
	}
	st := b.fake.Stats()
	require.Zero(t, st.OverlappingIDs, "answered requests hold nothing")
	require.Equal(t, int64(1), st.MaxInFlight)
}

func TestTombstones(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RejectField: "bad"}, nil)
	_, err := b.push(t, batch(1, 2, 1, ""))
	require.NoError(t, err)
	its := []thirdparty.Item{
		{ID: "1", Version: 2, Deleted: true},
		{ID: "3", Version: 1, Payload: json.RawMessage(`{"n":3}`)},
		{ID: "2", Version: 5, Deleted: true},
	}
	res, err := b.push(t, its)
	require.NoError(t, err)
	require.Empty(t, res.Rejected)

	st := b.fake.Stats()
	require.Equal(t, int64(2), st.Tombstones)
	require.Equal(t, map[int64]int64{1: 2, 2: 5, 3: 1}, b.fake.Latest())
	d := b.fake.Deliveries()
	require.Len(t, d, 5)
	require.True(t, d[2].Deleted)
	require.Equal(t, int64(1), d[2].ID)
	require.False(t, d[3].Deleted)
	require.True(t, d[4].Deleted)

	// A tombstone below an accepted version is out of order.
	_, err = b.push(t, []thirdparty.Item{{ID: "2", Version: 4, Deleted: true}})
	require.NoError(t, err)
	require.Equal(t, int64(1), b.fake.Stats().OutOfOrder)
}

func TestTombstoneValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	header := map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k"}
	tests := []struct {
		name, body string
		status     int
		want       string
	}{
		{"tombstone", `{"items":[{"id":"1","version":2,"deleted":true}]}`, 200, ""},
		{"deleted false with payload", `{"items":[{"id":"2","version":1,"deleted":false,"payload":1}]}`, 200, ""},
		{"tombstone with payload", `{"items":[{"id":"3","version":2,"deleted":true,"payload":{}}]}`, 400, "tombstone but carries a payload"},
		{"tombstone with null payload", `{"items":[{"id":"3","version":2,"deleted":true,"payload":null}]}`, 400, "tombstone but carries a payload"},
		{"deleted false without payload", `{"items":[{"id":"4","version":2,"deleted":false}]}`, 400, "has no payload"},
		{"deleted not a boolean", `{"items":[{"id":"5","version":2,"deleted":"yes"}]}`, 400, "must be true or false"},
	}
	for i, tt := range tests {
		h := map[string]string{}
		for k, v := range header {
			h[k] = v
		}
		h["Idempotency-Key"] = fmt.Sprint("k", i)
		code, _, body := b.post(t, http.MethodPost, "/v1/batches", h, tt.body)
		require.Equal(t, tt.status, code, tt.name)
		require.Contains(t, body, tt.want, tt.name)
	}
	require.Equal(t, int64(1), b.fake.Stats().Tombstones)
}

func TestStatsRouteNamesNewCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	code, _, body := b.post(t, http.MethodGet, "/v1/stats", nil, "")
	require.Equal(t, http.StatusOK, code)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m))
	for _, k := range []string{"max_in_flight", "overlapping_ids", "out_of_order", "tombstones", "over_quota", "bad_answers",
		"duplicates_same_key", "duplicates_other_key"} {
		require.Contains(t, m, k)
	}
}
