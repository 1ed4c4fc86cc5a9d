package fakethirdparty_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestRateLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        fakethirdparty.Config
		wantWait   time.Duration
		wantHeader func(string) bool
	}{
		{"computed seconds", fakethirdparty.Config{RateLimit: 0.5, RateBurst: 2}, 2 * time.Second,
			func(h string) bool { return h == "2" }},
		{"fixed", fakethirdparty.Config{RateLimit: 10, RateBurst: 2, RetryAfter: 5 * time.Second}, 5 * time.Second,
			func(h string) bool { return h == "5" }},
		{"sub-second rounds up", fakethirdparty.Config{RateLimit: 10, RateBurst: 2}, time.Second,
			func(h string) bool { return h == "1" }},
		{"http date", fakethirdparty.Config{RateLimit: 0.5, RateBurst: 2, RetryAfterHTTPDate: true}, 2 * time.Second,
			func(h string) bool { _, err := http.ParseTime(h); return err == nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.cfg, nil)
			for i := range 2 {
				_, err := b.push(t, batch(i, 1, 1, ""))
				require.NoError(t, err)
			}
			_, err := b.push(t, batch(100, 1, 1, ""))
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.True(t, e.RateLimited())
			require.Equal(t, tt.wantWait, e.RetryAfter)

			code, h, _ := b.post(t, http.MethodPost, "/v1/batches", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "x"}, `{"items":[{"id":"1","version":1,"payload":{}}]}`)
			require.Equal(t, http.StatusTooManyRequests, code)
			require.True(t, tt.wantHeader(h.Get("Retry-After")), h.Get("Retry-After"))

			// Refused requests spend no tokens: after the wait, one passes.
			b.clock.Advance(tt.wantWait)
			_, err = b.push(t, batch(200, 1, 1, ""))
			require.NoError(t, err)
			require.Equal(t, int64(2), b.fake.Stats().RequestsByStatus["429"])
		})
	}
}

func TestFailureRate(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1, FailureStatus: http.StatusBadGateway}, nil)
	_, err := b.push(t, batch(1, 1, 1, ""))
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusBadGateway, e.StatusCode)
	require.True(t, e.Transient())

	// A seed makes the draws repeatable.
	outcomes := func() []int {
		f := fakethirdparty.New(fakethirdparty.Config{FailureRate: 0.5, Seed: 42})
		var got []int
		for i := range 40 {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/v1/batches", strings.NewReader(fmt.Sprintf(`{"items":[{"id":"%d","version":1,"payload":{}}]}`, i)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprint(i))
			f.ServeHTTP(rec, req)
			got = append(got, rec.Code)
		}
		return got
	}
	first := outcomes()
	require.Equal(t, first, outcomes())
	require.Contains(t, first, http.StatusOK)
	require.Contains(t, first, http.StatusServiceUnavailable)
}

func TestLatency(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Latency: 80 * time.Millisecond, Now: time.Now}, nil)
	start := time.Now()
	_, err := b.push(t, batch(1, 1, 1, ""))
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond)
}

func TestTimeoutRate(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{TimeoutRate: 1}, &thirdparty.Config{Timeout: 100 * time.Millisecond})
	_, err := b.push(t, batch(1, 1, 1, ""))
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.True(t, e.Timeout)
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
	require.Eventually(t, func() bool { return b.fake.Stats().RequestsByStatus["timeout"] == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, b.fake.Stats().ItemsAccepted)
}

func TestMaxBatchItems(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{MaxBatchItems: 3}, nil)
	_, err := b.push(t, batch(1, 4, 1, ""))
	require.Equal(t, thirdparty.ClassBatchRefused, thirdparty.Classify(err))
	_, err = b.push(t, batch(1, 3, 1, ""))
	require.NoError(t, err)
	st := b.fake.Stats()
	require.Equal(t, int64(7), st.ItemsReceived)
	require.Equal(t, int64(3), st.ItemsAccepted)
	require.Equal(t, int64(1), st.RequestsByStatus["413"])
}

func TestRejectField(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RejectField: "secret"}, nil)
	its := []thirdparty.Item{
		{ID: "1", Version: 1, Payload: json.RawMessage(`{"secret":1}`)},
		{ID: "2", Version: 1, Payload: json.RawMessage(`{"nested":{"secret":1},"x":"secret"}`)},
		{ID: "3", Version: 1, Payload: json.RawMessage(`"secret"`)},
		{ID: "4", Version: 1, Payload: json.RawMessage(`{"a":[1,{"secret":2}], "secret" : null}`)},
	}
	res, err := b.push(t, its)
	require.NoError(t, err)
	require.Equal(t, []thirdparty.Rejection{
		{ID: "1", Error: "field secret is not allowed"},
		{ID: "4", Error: "field secret is not allowed"},
	}, res.Rejected)
	require.Equal(t, map[int64]int64{2: 1, 3: 1}, b.fake.Latest())
	st := b.fake.Stats()
	require.Equal(t, int64(2), st.ItemsRejected)
	require.Equal(t, int64(2), st.ItemsAccepted)
}

func TestPoisonField(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{PoisonField: "poison"}, nil)
	its := batch(1, 3, 1, "")
	its[2].Payload = json.RawMessage(`{"poison":"yes"}`)
	_, err := b.push(t, its)
	require.Equal(t, thirdparty.ClassBatchRefused, thirdparty.Classify(err))
	// Split as the contract asks: the clean halves go through.
	_, err = b.push(t, its[:2])
	require.NoError(t, err)
	_, err = b.push(t, its[2:])
	require.Equal(t, thirdparty.ClassBatchRefused, thirdparty.Classify(err))
	require.Equal(t, int64(2), b.fake.Stats().ItemsAccepted)
}

func TestToken(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Token: "right"}, &thirdparty.Config{Token: "wrong"})
	_, err := b.push(t, batch(1, 1, 1, ""))
	require.Equal(t, thirdparty.ClassAuth, thirdparty.Classify(err))
	require.NotContains(t, err.Error(), "wrong")

	b.fake.SetConfig(fakethirdparty.Config{Token: "wrong", Now: b.clock.Now})
	_, err = b.push(t, batch(1, 1, 1, ""))
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"401": 1, "200": 1}, b.fake.Stats().RequestsByStatus)
}

func TestOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	b.fake.Outage(10 * time.Second)
	_, err := b.push(t, batch(1, 1, 1, ""))
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusServiceUnavailable, e.StatusCode)
	require.Equal(t, 10*time.Second, e.RetryAfter)
	b.clock.Advance(10 * time.Second)
	_, err = b.push(t, batch(1, 1, 1, ""))
	require.NoError(t, err)

	// The same over the admin route.
	code, _, body := b.post(t, http.MethodPost, "/v1/admin/outage?duration=3s", nil, "")
	require.Equal(t, http.StatusOK, code, body)
	_, err = b.push(t, batch(2, 1, 1, ""))
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
	code, _, _ = b.post(t, http.MethodPost, "/v1/admin/outage?duration=soon", nil, "")
	require.Equal(t, http.StatusBadRequest, code)
}
