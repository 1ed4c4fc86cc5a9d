package thirdparty_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestRetryAfterUncapped(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	longest := time.Duration(1<<63 - 1)
	tests := []struct {
		name   string
		header string
		want   time.Duration
	}{
		{"a billion seconds", "999999999", 999999999 * time.Second},
		{"beyond a duration", "99999999999999999999999", longest},
		{"just beyond", "9223372037", longest},
		{"year 9999", "Fri, 31 Dec 9999 23:59:59 GMT", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Sub(now)},
		{"negative", "-3", 0},
		{"fraction", "1.5", 0},
		{"garbage", "soon\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, thirdparty.ParseRetryAfterForTest(tt.header, now))
		})
	}
	t.Run("raw kept", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "999999999")
			w.WriteHeader(http.StatusTooManyRequests)
		}, &thirdparty.Config{Now: func() time.Time { return now }})
		_, err := b.client.Push(t.Context(), "k", items(1))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, 999999999*time.Second, e.RetryAfter)
		require.Equal(t, "999999999", e.RetryAfterRaw)
		require.Contains(t, err.Error(), `"999999999"`)
	})
}

func TestQuotaOnEveryAnswer(t *testing.T) {
	t.Parallel()
	for _, status := range []int{200, 429, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("RateLimit-Limit", "10")
				w.Header().Set("RateLimit-Remaining", "0")
				w.Header().Set("RateLimit-Reset", "3")
				w.WriteHeader(status)
			}, nil)
			res, err := b.client.Push(t.Context(), "k", items(1))
			want := thirdparty.Quota{Known: true, Limit: 10, Remaining: 0, Reset: 3 * time.Second}
			if status == 200 {
				require.NoError(t, err)
				require.Equal(t, want, res.Quota)
				return
			}
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, want, e.Quota)
		})
	}
	t.Run("bad answer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Remaining", "4")
			_, _ = io.WriteString(w, "<html>")
		}, nil)
		_, err := b.client.Push(t.Context(), "k", items(1))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, thirdparty.Quota{Known: true, Remaining: 4}, e.Quota)
	})
}

func TestParseQuota(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   thirdparty.Quota
	}{
		{"none", nil, thirdparty.Quota{}},
		{"ietf", map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "42", "RateLimit-Reset": "30"},
			thirdparty.Quota{Known: true, Limit: 100, Remaining: 42, Reset: 30 * time.Second}},
		{"ietf policy list", map[string]string{"RateLimit-Limit": "10, 10;w=1, 1000;w=3600", "RateLimit-Remaining": "9", "RateLimit-Reset": "1"},
			thirdparty.Quota{Known: true, Limit: 10, Remaining: 9, Reset: time.Second}},
		{"combined", map[string]string{"RateLimit": "limit=10, remaining=0, reset=3"},
			thirdparty.Quota{Known: true, Limit: 10, Remaining: 0, Reset: 3 * time.Second}},
		{"combined structured", map[string]string{"RateLimit": `"default";r=5;t=7`},
			thirdparty.Quota{Known: true, Remaining: 5, Reset: 7 * time.Second}},
		{"x seconds", map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "12"},
			thirdparty.Quota{Known: true, Limit: 60, Remaining: 0, Reset: 12 * time.Second}},
		{"x unix time", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": fmt.Sprint(now.Add(90 * time.Second).Unix())},
			thirdparty.Quota{Known: true, Remaining: 0, Reset: 90 * time.Second}},
		{"x unix millis", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": fmt.Sprint(now.Add(2 * time.Second).UnixMilli())},
			thirdparty.Quota{Known: true, Remaining: 0, Reset: 2 * time.Second}},
		{"x unix time past", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": fmt.Sprint(now.Add(-time.Hour).Unix())},
			thirdparty.Quota{Known: true, Remaining: 0}},
		{"fraction", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "0.25"},
			thirdparty.Quota{Known: true, Reset: 250 * time.Millisecond}},
		{"ietf wins over x", map[string]string{"RateLimit-Remaining": "1", "X-RateLimit-Remaining": "2"},
			thirdparty.Quota{Known: true, Remaining: 1}},
		{"garbage remaining falls through", map[string]string{"RateLimit-Remaining": "lots", "X-RateLimit-Remaining": "2"},
			thirdparty.Quota{Known: true, Remaining: 2}},
		{"negative remaining", map[string]string{"RateLimit-Remaining": "-1"}, thirdparty.Quota{}},
		{"huge remaining", map[string]string{"RateLimit-Remaining": "99999999999999"}, thirdparty.Quota{}},
		{"garbage reset ignored", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "NaN", "RateLimit-Limit": "x"},
			thirdparty.Quota{Known: true}},
		{"negative reset ignored", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "-5"},
			thirdparty.Quota{Known: true}},
		{"huge reset saturates", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "1e300"},
			thirdparty.Quota{Known: true, Reset: time.Duration(1<<63 - 1)}},
		{"reset without remaining says nothing", map[string]string{"RateLimit-Reset": "5"}, thirdparty.Quota{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			require.Equal(t, tt.want, thirdparty.ParseQuotaForTest(h, now))
		})
	}
}
