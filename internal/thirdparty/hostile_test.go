package thirdparty_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// TestRedirectNotFollowed: a 3xx is a configuration error; the batch and the
// token never reach the Location, on another port or the same server.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	const token = "tok-redirect-secret"
	for _, status := range []int{301, 302, 303, 307, 308} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			// The elsewhere server stands for "another port of the same
			// host": it must never see a request, least of all the token.
			var elsewhere atomic.Int64
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				elsewhere.Add(1)
				if strings.Contains(r.Header.Get("Authorization"), token) {
					t.Errorf("token reached %s", r.URL)
				}
			}))
			t.Cleanup(other.Close)
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/batches" {
					return // a followed same-origin redirect would land here
				}
				w.Header().Set("Location", other.URL+"/v1/batches?api_key=loc-secret#frag")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, "<html>moved</html>")
			}, &thirdparty.Config{Token: token})

			res, err := b.client.Push(t.Context(), "k", items(3))
			require.Nil(t, res, "a redirect is never an acceptance")
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, status, e.StatusCode)
			require.True(t, e.ConfigRefused())
			require.False(t, e.Transient())
			require.Equal(t, thirdparty.ClassConfig, thirdparty.Classify(err))
			require.Equal(t, other.URL+"/v1/batches?[redacted]", e.Location)
			require.Contains(t, err.Error(), other.URL+"/v1/batches?[redacted]")
			require.NotContains(t, err.Error(), "loc-secret")
			require.NotContains(t, err.Error(), token)
			require.Len(t, b.requests(), 1)
			require.Zero(t, elsewhere.Load())
		})
	}
}

// TestRedirectNotFollowedWithCallerClient: the caller's http.Client may
// follow redirects; the push still does not, and the caller's client keeps
// its own policy.
func TestRedirectNotFollowedWithCallerClient(t *testing.T) {
	t.Parallel()
	var followed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed.Add(1)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	hc := &http.Client{}
	c, err := thirdparty.New(&thirdparty.Config{URL: srv.URL, HTTPClient: hc})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Push(t.Context(), "k", items(1))
	require.Equal(t, thirdparty.ClassConfig, thirdparty.Classify(err))
	require.Zero(t, followed.Load())
	require.Nil(t, hc.CheckRedirect, "the caller's client is not changed")
}

// TestBadAnswersAreNotAcceptance: a 2xx whose body is not the contract's
// results is a transient failure that keeps its status and an excerpt,
// never "all accepted".
func TestBadAnswersAreNotAcceptance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		why  string
	}{
		{"html", "<!DOCTYPE html><html><body>Welcome to nginx!</body></html>", "HTML"},
		{"malformed", `{"results":[{"id":"1","status":"accepted"}`, "not valid JSON"},
		{"trailing garbage", `{"results":[]} and more`, "not valid JSON"},
		{"plain text", "ok", "not a JSON object"},
		{"array", `[{"id":"1","status":"accepted"}]`, "not a JSON object"},
		{"string", `"accepted"`, "not a JSON object"},
		{"number", `200`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"results object", `{"results":{"id":"1"}}`, "not an array"},
		{"result not object", `{"results":["1"]}`, "not an object"},
		{"unknown status word", `{"results":[{"id":"1","status":"queued"}]}`, "neither accepted nor rejected"},
		{"status in capitals", `{"results":[{"id":"1","status":"ACCEPTED"}]}`, "neither accepted nor rejected"},
		{"status missing", `{"results":[{"id":"1"}]}`, "status"},
		{"status not string", `{"results":[{"id":"1","status":true}]}`, "not a string"},
		{"unknown id", `{"results":[{"id":"99","status":"accepted"}]}`, "not in the batch"},
		{"unknown numeric id", `{"results":[{"id":99,"status":"rejected"}]}`, "not in the batch"},
		{"duplicated id", `{"results":[{"id":"1","status":"accepted"},{"id":"1","status":"rejected"}]}`, "named twice"},
		{"id missing", `{"results":[{"status":"accepted"}]}`, "no id"},
		{"id fraction", `{"results":[{"id":1.5,"status":"accepted"}]}`, "neither a string nor an integer"},
		{"id word", `{"results":[{"id":"one","status":"accepted"}]}`, "not in the batch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tt.body)
			}, nil)
			res, err := b.client.Push(t.Context(), "k", items(3))
			require.Nil(t, res)
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, http.StatusOK, e.StatusCode)
			require.Contains(t, e.BadAnswer, tt.why)
			require.True(t, e.Transient(), "retried under the same key, counted by the breaker")
			require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
			require.Equal(t, thirdparty.SafeText(tt.body), e.Body, "the excerpt is kept for the log")
			require.Contains(t, err.Error(), "unusable body")
		})
	}
}

func TestOversizedAnswer(t *testing.T) {
	t.Parallel()
	const limit = 16 << 20
	tests := []struct {
		name string
		size int
		ok   bool
	}{
		// Whitespace-padded `{}`: exactly at the limit is still read
		// whole; one byte more is not an answer.
		{"at the limit", limit, true},
		{"one byte over", limit + 1, false},
		{"far over", 3 * limit, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "{}")
				pad := strings.Repeat(" ", 64<<10)
				for left := tt.size - 2; left > 0; left -= len(pad) {
					_, _ = io.WriteString(w, pad[:min(left, len(pad))])
				}
			}, &thirdparty.Config{Timeout: 2 * time.Minute}) // 16 MiB under -race on a busy machine

			res, err := b.client.Push(t.Context(), "k", items(2))
			if tt.ok {
				require.NoError(t, err)
				require.Empty(t, res.Rejected)
				return
			}
			var e *thirdparty.Error
			require.ErrorAs(t, err, &e)
			require.Contains(t, e.BadAnswer, "larger than 16 MiB")
			require.True(t, e.Transient())
			require.LessOrEqual(t, len(e.Body), thirdparty.SafeTextMax)
		})
	}
}

// TestTokenEchoedIsRedacted: a token echoed back, plain or URL-escaped, in
// a 422 body, a rejection reason or a Retry-After never leaves the package.
func TestTokenEchoedIsRedacted(t *testing.T) {
	t.Parallel()
	const token = "tok/echo+me=="
	escaped := url.QueryEscape(token)
	t.Run("422", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = fmt.Fprintf(w, "bad: %s or %s", r.Header.Get("Authorization"), escaped)
		}, &thirdparty.Config{Token: token})
		_, err := b.client.Push(t.Context(), "k", items(1))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, "bad: Bearer [redacted] or [redacted]", e.Body)
		require.NotContains(t, err.Error(), token)
		require.NotContains(t, err.Error(), escaped)
	})
	t.Run("rejection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, `{"results":[{"id":"1","status":"rejected","error":"token %s refused"}]}`, token)
		}, &thirdparty.Config{Token: token})
		res, err := b.client.Push(t.Context(), "k", items(2))
		require.NoError(t, err)
		require.Equal(t, []thirdparty.Rejection{{ID: "1", Error: "token [redacted] refused"}}, res.Rejected)
	})
	t.Run("cut at the token", func(t *testing.T) {
		t.Parallel()
		// The token straddles the excerpt's end: no prefix of it survives.
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, strings.Repeat("x", thirdparty.SafeTextMax-12)+token+strings.Repeat("y", 5000))
		}, &thirdparty.Config{Token: token})
		_, err := b.client.Push(t.Context(), "k", items(1))
		require.NotContains(t, err.Error(), token[:6])
	})
	t.Run("retry-after", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", token)
			w.WriteHeader(http.StatusTooManyRequests)
		}, &thirdparty.Config{Token: token})
		_, err := b.client.Push(t.Context(), "k", items(1))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, "[redacted]", e.RetryAfterRaw)
		require.NotContains(t, err.Error(), token)
	})
}

// TestInjectionInErrorText: newlines and terminal escapes in a third
// party's text cannot forge log lines or drive a terminal.
func TestInjectionInErrorText(t *testing.T) {
	t.Parallel()
	const evil = "nope\nlevel=ERROR msg=\"forged line\"\r\x1b[2J\x1b]0;title\x07\u2028\u202e"
	check := func(t *testing.T, s string) {
		t.Helper()
		for _, bad := range []string{"\n", "\r", "\x1b", "\x07", "\u2028", "\u202e"} {
			require.NotContains(t, s, bad)
		}
		require.Contains(t, s, `nope\nlevel=ERROR`)
		require.Contains(t, s, `\x1b[2J`)
	}
	t.Run("error body", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, evil)
		}, nil)
		_, err := b.client.Push(t.Context(), "k", items(1))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		check(t, e.Body)
		check(t, err.Error())
	})
	t.Run("rejection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, `{"results":[{"id":"2","status":"rejected","error":%s}]}`, jsonString(evil))
		}, nil)
		res, err := b.client.Push(t.Context(), "k", items(2))
		require.NoError(t, err)
		require.Len(t, res.Rejected, 1)
		check(t, res.Rejected[0].Error)
	})
	t.Run("bad answer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, `{"results":[{"id":"2","status":%s}]}`, jsonString(evil))
		}, nil)
		_, err := b.client.Push(t.Context(), "k", items(2))
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e)
		check(t, e.BadAnswer)
		check(t, err.Error())
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestURLSecretsNotInTransportErrors: an api_key in the configured URL (and
// a password in it) never appears in a transport error, which net/http
// builds around the whole URL.
func TestURLSecretsNotInTransportErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // connection refused from now on

	c, err := thirdparty.New(&thirdparty.Config{URL: "http://user:pw-secret@" + addr + "/api?api_key=key-secret"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Push(t.Context(), "k", items(1))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "key-secret")
	require.NotContains(t, err.Error(), "pw-secret")
	require.NotContains(t, err.Error(), "user")
	require.Contains(t, err.Error(), "http://"+addr+"/api/v1/batches?[redacted]")
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
	var ue *url.Error
	require.ErrorAs(t, err, &ue, "the chain is kept")
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
}

// TestMalformedResponseEchoingToken: net/http quotes a malformed answer in
// its error; the token in it does not survive.
func TestMalformedResponseEchoingToken(t *testing.T) {
	t.Parallel()
	const token = "tok-malformed-secret"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = conn.Read(make([]byte, 64<<10))
		_, _ = io.WriteString(conn, token+"\x1b[2J\r\n\r\n")
	}()
	c, err := thirdparty.New(&thirdparty.Config{URL: "http://" + ln.Addr().String(), Token: token})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Push(t.Context(), "k", items(1))
	<-done
	require.Error(t, err)
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
	require.NotContains(t, err.Error(), token)
	require.NotContains(t, err.Error(), "\x1b[")
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.Contains(t, e.Err.Error(), token, "the case is real: net/http quotes the answer")
}

// TestPushBodySendsBytesAsGiven: PushBody sends the body it is given, not a
// re-encoding, and checks answers against the ids it is given.
func TestPushBodySendsBytesAsGiven(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"results":[{"id":"7","status":"rejected","error":"no"}]}`)
	}, nil)
	body := []byte(`{"items":[{"id":"7","version":2,"payload":{"b": 1,  "a": [1.0, 2e3]}}]}`)
	res, err := b.client.PushBody(t.Context(), "k", body, []string{"7"})
	require.NoError(t, err)
	require.Equal(t, []thirdparty.Rejection{{ID: "7", Error: "no"}}, res.Rejected)
	reqs := b.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, body, reqs[0].Body)

	// The same answer to a body whose ids do not hold 7 is no answer.
	_, err = b.client.PushBody(t.Context(), "k2", body, []string{"8"})
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.Contains(t, e.BadAnswer, "not in the batch")

	// No ids: nothing is sent.
	res, err = b.client.PushBody(t.Context(), "k3", nil, nil)
	require.NoError(t, err)
	require.Empty(t, res.Rejected)
	require.Len(t, b.requests(), 2)

	_, err = b.client.PushBody(t.Context(), "", body, []string{"7"})
	require.ErrorContains(t, err, "empty idempotency key")
	require.False(t, errors.As(err, &e))
}
