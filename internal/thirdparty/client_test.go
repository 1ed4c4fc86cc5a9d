package thirdparty_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

type captured struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

type testBundle struct {
	client *thirdparty.Client
	server *httptest.Server
	mu     sync.Mutex
	reqs   []captured
}

func (b *testBundle) requests() []captured {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]captured(nil), b.reqs...)
}

// setup starts a server that records every request and answers with
// handler, and a client pointed at it. cfg may be nil; its URL is set here.
func setup(t *testing.T, handler http.HandlerFunc, cfg *thirdparty.Config) *testBundle {
	t.Helper()
	b := &testBundle{}
	b.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.reqs = append(b.reqs, captured{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		b.mu.Unlock()
		if handler != nil {
			handler(w, r)
		}
	}))
	t.Cleanup(b.server.Close)
	if cfg == nil {
		cfg = &thirdparty.Config{}
	}
	cfg.URL = b.server.URL
	client, err := thirdparty.New(cfg)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	b.client = client
	return b
}

func items(n int) []thirdparty.Item {
	out := make([]thirdparty.Item, n)
	for i := range out {
		out[i] = thirdparty.Item{ID: strconv.Itoa(i + 1), Version: int64(i%3 + 1), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"s":"x\"y"}`, i))}
	}
	return out
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  *thirdparty.Config
		want string
	}{
		{"nil", nil, "config is required"},
		{"empty URL", &thirdparty.Config{}, "URL is required"},
		{"bad scheme", &thirdparty.Config{URL: "ftp://x"}, "URL scheme"},
		{"unparseable", &thirdparty.Config{URL: "http://us:er@[::1"}, "URL is not a valid URL"},
		{"no host", &thirdparty.Config{URL: "http:///path"}, "URL has no host"},
		{"negative timeout", &thirdparty.Config{URL: "http://x", Timeout: -time.Second}, "Timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := thirdparty.New(tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestPushBodyAndHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &thirdparty.Config{Token: "s3cret"})
	batch := []thirdparty.Item{
		{ID: "42", Version: 3, Payload: json.RawMessage(`{"any":"json","nested":{"a":[1,2]}}`)},
		{ID: "9007199254740993", Version: 1, Payload: json.RawMessage(`"text"`)},
		{ID: "7", Version: 2},
	}
	res, err := b.client.Push(t.Context(), "syncer-abc", batch)
	require.NoError(t, err)
	require.Empty(t, res.Rejected)

	reqs := b.requests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.Equal(t, http.MethodPost, r.Method)
	require.Equal(t, "/v1/batches", r.Path)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.Equal(t, "syncer-abc", r.Header.Get("Idempotency-Key"))
	require.Equal(t, "Bearer s3cret", r.Header.Get("Authorization"))
	require.JSONEq(t, `{"items":[
		{"id":"42","version":3,"payload":{"any":"json","nested":{"a":[1,2]}}},
		{"id":"9007199254740993","version":1,"payload":"text"},
		{"id":"7","version":2,"payload":null}]}`, string(r.Body))
	// Large ids must survive as strings, not float64.
	require.Contains(t, string(r.Body), `"id":"9007199254740993"`)
}

func TestPushNoTokenNoAuthorization(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	_, err := b.client.Push(t.Context(), "k", items(2))
	require.NoError(t, err)
	reqs := b.requests()
	require.Len(t, reqs, 1)
	_, ok := reqs[0].Header["Authorization"]
	require.False(t, ok)
}

func TestPushBaseURLWithPath(t *testing.T) {
	t.Parallel()
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { path = r.URL.Path }))
	t.Cleanup(srv.Close)
	c, err := thirdparty.New(&thirdparty.Config{URL: srv.URL + "/api/"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Push(t.Context(), "k", items(1))
	require.NoError(t, err)
	require.Equal(t, "/api/v1/batches", path)
}

func TestPushEmptyBatchSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	res, err := b.client.Push(t.Context(), "k", nil)
	require.NoError(t, err)
	require.Empty(t, res.Rejected)
	require.Empty(t, b.requests())

	_, err = b.client.Push(t.Context(), "", items(1))
	require.ErrorContains(t, err, "empty idempotency key")
}

func TestPushResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want []thirdparty.Rejection
	}{
		{"empty body", ``, nil},
		{"empty object", `{}`, nil},
		{"no results", `{"results":[]}`, nil},
		{"all listed accepted", `{"results":[{"id":"1","status":"accepted"},{"id":"2","status":"accepted"}]}`, nil},
		{"some rejected", `{"results":[{"id":"1","status":"accepted"},{"id":"2","status":"rejected","error":"bad field"},{"id":"3","status":"rejected"}]}`,
			[]thirdparty.Rejection{{ID: "2", Error: "bad field"}, {ID: "3"}}},
		{"numeric id", `{"results":[{"id":2,"status":"rejected","error":"x"}]}`, []thirdparty.Rejection{{ID: "2", Error: "x"}}},
		{"whitespace", " \n\t ", nil},
		{"other fields", `{"ok":true,"request_id":"r-1"}`, nil},
		{"null results", `{"results":null}`, nil},
		{"object error", `{"results":[{"id":"1","status":"rejected","error":{"code":7}}]}`, []thirdparty.Rejection{{ID: "1", Error: `{"code":7}`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tt.body)
			}, nil)
			res, err := b.client.Push(t.Context(), "k", items(3))
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Rejected)
		})
	}
}

func TestPushReusesConnections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	remotes := map[string]bool{}
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		// An answer with a body the client does not need must still be
		// drained so the connection is reused.
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, strings.Repeat("y", 4096))
	}, nil)
	for range 20 {
		_, err := b.client.Push(t.Context(), "k", items(5))
		require.Error(t, err)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, remotes, 1)
}

// TestIdleConnsFollowInFlight: with as many idle connections kept as
// requests in flight, rounds of 32 concurrent requests dial 32 connections
// once; with the 16 kept by default, every round closes and dials again.
func TestIdleConnsFollowInFlight(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		idle      int
		wantFewer bool // dials stay at 32
	}{{32, true}, {0, false}} {
		var dials atomic.Int64
		release := make(chan struct{})
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			_, _ = io.WriteString(w, `{"results":[]}`)
		}))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				dials.Add(1)
			}
		}
		srv.Start()
		client, err := thirdparty.New(&thirdparty.Config{URL: srv.URL, IdleConns: tt.idle})
		require.NoError(t, err)
		for range 5 {
			var wg sync.WaitGroup
			for i := range 32 {
				wg.Go(func() {
					_, err := client.Push(t.Context(), fmt.Sprint("k", i), items(1))
					assert.NoError(t, err)
				})
			}
			require.Eventually(t, func() bool { return dials.Load() >= 32 }, 5*time.Second, time.Millisecond)
			time.Sleep(20 * time.Millisecond) // every request of the round is in
			for range 32 {
				release <- struct{}{}
			}
			wg.Wait()
		}
		client.Close()
		srv.Close()
		if tt.wantFewer {
			require.EqualValues(t, 32, dials.Load(), "idle %d", tt.idle)
		} else {
			require.Greater(t, dials.Load(), int64(32), "idle %d", tt.idle)
		}
	}
}

func TestPushConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"results":[{"id":"1","status":"rejected","error":"no"}]}`)
	}, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				its := items(50)
				body := thirdparty.AppendBatch(nil, its)
				res, err := b.client.Push(t.Context(), thirdparty.BatchKey("inst", fmt.Sprint(i, j), body), its)
				if err != nil {
					t.Error(err)
					return
				}
				if len(res.Rejected) != 1 {
					t.Errorf("rejected: %v", res.Rejected)
				}
			}
		})
	}
	wg.Wait()
	for _, r := range b.requests() {
		var v struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &v), "a pooled buffer was reused too early")
		require.Len(t, v.Items, 50)
	}
}

func BenchmarkEncode(b *testing.B) {
	// 500 items of about 300 bytes: the size of a live-sync batch.
	payload := json.RawMessage(`{"name":"` + strings.Repeat("a", 240) + `","count":12345,"tags":["x","y"]}`)
	its := make([]thirdparty.Item, 500)
	for i := range its {
		its[i] = thirdparty.Item{ID: strconv.Itoa(1_000_000 + i), Version: 3, Payload: payload}
	}
	buf := thirdparty.AppendBatch(nil, its)
	b.ReportAllocs()
	for b.Loop() {
		buf = thirdparty.AppendBatch(buf[:0], its)
	}
}

func BenchmarkPush(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	c, err := thirdparty.New(&thirdparty.Config{URL: srv.URL})
	require.NoError(b, err)
	defer c.Close()
	payload := json.RawMessage(`{"name":"` + strings.Repeat("a", 240) + `","count":12345,"tags":["x","y"]}`)
	its := make([]thirdparty.Item, 500)
	for i := range its {
		its[i] = thirdparty.Item{ID: strconv.Itoa(1_000_000 + i), Version: 3, Payload: payload}
	}
	key := thirdparty.BatchKey("bench", "", thirdparty.AppendBatch(nil, its))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Push(context.Background(), key, its); err != nil {
			b.Fatal(err)
		}
	}
}
