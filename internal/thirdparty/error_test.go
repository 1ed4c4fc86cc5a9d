package thirdparty_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func TestPushStatusClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		class  thirdparty.Class
	}{
		{200, thirdparty.ClassNone},
		{202, thirdparty.ClassNone},
		{204, thirdparty.ClassNone},
		{400, thirdparty.ClassBatchRefused},
		{401, thirdparty.ClassAuth},
		{403, thirdparty.ClassAuth},
		{301, thirdparty.ClassConfig},
		{302, thirdparty.ClassConfig},
		{303, thirdparty.ClassConfig},
		{307, thirdparty.ClassConfig},
		{308, thirdparty.ClassConfig},
		{404, thirdparty.ClassConfig},
		{410, thirdparty.ClassConfig},
		{408, thirdparty.ClassTransient},
		{409, thirdparty.ClassTransient},
		{413, thirdparty.ClassBatchRefused},
		{422, thirdparty.ClassBatchRefused},
		{429, thirdparty.ClassRateLimited},
		{500, thirdparty.ClassTransient},
		{502, thirdparty.ClassTransient},
		{503, thirdparty.ClassTransient},
		{504, thirdparty.ClassTransient},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, `{"error":"because"}`)
			}, nil)
			_, err := b.client.Push(t.Context(), "k", items(2))
			require.Equal(t, tt.class, thirdparty.Classify(err))
			if tt.class == thirdparty.ClassNone {
				require.NoError(t, err)
				return
			}
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.status, e.StatusCode)
			require.Equal(t, `{"error":"because"}`, e.Body)
			require.ErrorContains(t, err, fmt.Sprint(tt.status))
			require.Equal(t, tt.class == thirdparty.ClassTransient, e.Transient())
			require.Equal(t, tt.class == thirdparty.ClassRateLimited, e.RateLimited())
			require.Equal(t, tt.class == thirdparty.ClassBatchRefused, e.BatchRefused())
			require.Equal(t, tt.class == thirdparty.ClassAuth, e.AuthRefused())
			require.Equal(t, tt.class == thirdparty.ClassConfig, e.ConfigRefused())
			// Classification survives the caller's wrapping.
			require.Equal(t, tt.class, thirdparty.Classify(fmt.Errorf("sync: %w", err)))
		})
	}
}

func TestClassifyOther(t *testing.T) {
	t.Parallel()
	require.Equal(t, thirdparty.ClassNone, thirdparty.Classify(nil))
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(errors.New("something")))
	require.Equal(t, "rate_limited", thirdparty.ClassRateLimited.String())
	require.Equal(t, "config", thirdparty.ClassConfig.String())
}

func TestPushErrorBodyTruncated(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		_, _ = io.WriteString(w, strings.Repeat("x", 100_000))
	}, nil)
	_, err := b.client.Push(t.Context(), "k", items(1))
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.LessOrEqual(t, len(e.Body), thirdparty.SafeTextMax)
	require.True(t, strings.HasSuffix(e.Body, "...[cut]"), e.Body)
	require.LessOrEqual(t, len(err.Error()), thirdparty.SafeTextMax+200)
}

func TestPushRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		status int
		header string
		want   time.Duration
	}{
		{"seconds", 429, "7", 7 * time.Second},
		{"http date", 429, now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"date in the past", 429, now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"absent", 429, "", 0},
		{"garbage", 429, "soon", 0},
		{"negative", 429, "-3", 0},
		{"on 503", 503, "2", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.header != "" {
					w.Header().Set("Retry-After", tt.header)
				}
				w.WriteHeader(tt.status)
			}, &thirdparty.Config{Now: func() time.Time { return now }})
			_, err := b.client.Push(t.Context(), "k", items(1))
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.want, e.RetryAfter)
		})
	}
}

func TestPushTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}, &thirdparty.Config{Timeout: 100 * time.Millisecond})
	defer close(release)
	start := time.Now()
	_, err := b.client.Push(t.Context(), "k", items(1))
	require.Less(t, time.Since(start), 5*time.Second)
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.True(t, e.Timeout)
	require.True(t, e.Transient())
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
	require.ErrorContains(t, err, "timed out")
	require.NotErrorIs(t, err, context.Canceled)
}

func TestPushSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	// Headers come at once but the body never ends: the timeout must cover
	// reading the answer too.
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = io.WriteString(w, `{"results":[`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}, &thirdparty.Config{Timeout: 100 * time.Millisecond})
	_, err := b.client.Push(t.Context(), "k", items(1))
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
}

func TestPushCallerCancel(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	_, err := b.client.Push(ctx, "k", items(1))
	require.ErrorIs(t, err, context.Canceled)
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.False(t, e.Timeout)

	// Already cancelled before the call.
	_, err = b.client.Push(ctx, "k", items(1))
	require.ErrorIs(t, err, context.Canceled)
}

func TestPushConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	c, err := thirdparty.New(&thirdparty.Config{URL: "http://" + addr, Token: "tok-connrefused"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Push(t.Context(), "k", items(1))
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.Zero(t, e.StatusCode)
	require.NotNil(t, e.Err)
	require.True(t, e.Transient())
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
	require.NotContains(t, err.Error(), "tok-connrefused")
}

func TestTokenNeverInErrors(t *testing.T) {
	t.Parallel()
	const token = "tok-3f9a-very-secret"
	// A server that echoes the Authorization header back in its error body.
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprintf(w, "bad credentials: %s", r.Header.Get("Authorization"))
	}, &thirdparty.Config{Token: token})
	_, err := b.client.Push(t.Context(), "k", items(1))
	require.Error(t, err)
	require.Equal(t, thirdparty.ClassAuth, thirdparty.Classify(err))
	require.NotContains(t, err.Error(), token)
	require.NotContains(t, fmt.Sprintf("%+v %#v", err, err), token)
	require.Contains(t, err.Error(), "[redacted]")

	// Timeout path.
	tb := setup(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
		&thirdparty.Config{Token: token, Timeout: 50 * time.Millisecond})
	_, err = tb.client.Push(t.Context(), "k", items(1))
	require.Error(t, err)
	require.NotContains(t, err.Error(), token)
}
