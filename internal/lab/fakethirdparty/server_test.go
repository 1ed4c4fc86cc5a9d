package fakethirdparty_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// clock is a stub clock tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type bundle struct {
	fake   *fakethirdparty.Server
	http   *httptest.Server
	client *thirdparty.Client
	clock  *clock
}

// setup serves a fake with cfg (its clock stubbed unless cfg.Now is set)
// and returns a thirdparty client for it.
func setup(t *testing.T, cfg fakethirdparty.Config, clientCfg *thirdparty.Config) *bundle {
	t.Helper()
	b := &bundle{clock: newClock()}
	if cfg.Now == nil {
		cfg.Now = b.clock.Now
	}
	b.fake = fakethirdparty.New(cfg)
	b.http = httptest.NewServer(b.fake)
	t.Cleanup(func() {
		b.fake.Close()
		b.http.Close()
	})
	if clientCfg == nil {
		clientCfg = &thirdparty.Config{}
	}
	clientCfg.URL = b.http.URL
	if clientCfg.Now == nil {
		clientCfg.Now = b.clock.Now
	}
	c, err := thirdparty.New(clientCfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	b.client = c
	return b
}

func (b *bundle) push(t *testing.T, its []thirdparty.Item) (*thirdparty.Result, error) {
	t.Helper()
	return b.client.Push(t.Context(), key(its), its)
}

// key is the Idempotency-Key of its, as the exporter derives it.
func key(its []thirdparty.Item) string {
	return thirdparty.BatchKey("test", "", thirdparty.AppendBatch(nil, its))
}

// post sends a raw request, for what the client would never send.
func (b *bundle) post(t *testing.T, method, path string, header map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.http.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	hc := *b.http.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(raw)
}

func batch(from, n int, version int64, payload string) []thirdparty.Item {
	out := make([]thirdparty.Item, n)
	for i := range out {
		p := payload
		if p == "" {
			p = fmt.Sprintf(`{"n":%d}`, from+i)
		}
		out[i] = thirdparty.Item{ID: strconv.Itoa(from + i), Version: version, Payload: json.RawMessage(p)}
	}
	return out
}

func TestAcceptsAndRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	res, err := b.push(t, batch(1, 3, 1, ""))
	require.NoError(t, err)
	require.Empty(t, res.Rejected)
	res, err = b.push(t, batch(2, 2, 2, ""))
	require.NoError(t, err)
	require.Empty(t, res.Rejected)

	require.Equal(t, map[int64]int64{1: 1, 2: 2, 3: 2}, b.fake.Latest())
	d := b.fake.Deliveries()
	require.Len(t, d, 5)
	require.Equal(t, fakethirdparty.Delivery{ID: 1, Version: 1, Key: key(batch(1, 3, 1, "")), At: b.clock.Now()}, d[0])
	require.Equal(t, int64(3), d[4].ID)

	reqs := b.fake.Requests()
	require.Len(t, reqs, 2)
	require.Equal(t, http.StatusOK, reqs[0].Status)
	require.Equal(t, 3, reqs[0].Items)
	require.False(t, reqs[0].Replayed)

	st := b.fake.Stats()
	require.Equal(t, int64(2), st.Requests)
	require.Equal(t, map[string]int64{"200": 2}, st.RequestsByStatus)
	require.Equal(t, int64(5), st.ItemsReceived)
	require.Equal(t, int64(5), st.ItemsAccepted)
	require.Equal(t, int64(5), st.DistinctPairs)
	require.Zero(t, st.DuplicatePairs)
	require.Zero(t, st.OutOfOrder)
	require.Equal(t, int64(2), st.MaxRequestsInOneSecond)
	require.Equal(t, b.clock.Now(), st.FirstRequestAt)
}

// ExpectedItems only sizes the records: the same requests get the same
// answers and leave the same records, beyond the size too and after a
// Reset.
func TestExpectedItemsChangesNoAnswer(t *testing.T) {
	t.Parallel()
	sized := setup(t, fakethirdparty.Config{ExpectedItems: 4}, nil)
	plain := setup(t, fakethirdparty.Config{}, nil)
	for round := range 2 {
		for _, b := range []*bundle{sized, plain} {
			for _, its := range [][]thirdparty.Item{batch(1, 3, 1, ""), batch(2, 3, 2, ""), batch(1, 3, 1, "")} {
				_, err := b.push(t, its)
				require.NoError(t, err)
			}
		}
		require.Equal(t, plain.fake.Deliveries(), sized.fake.Deliveries(), "round %d", round)
		require.Equal(t, plain.fake.Latest(), sized.fake.Latest(), "round %d", round)
		require.Equal(t, plain.fake.Stats(), sized.fake.Stats(), "round %d", round)
		require.Len(t, sized.fake.Deliveries(), 6, "round %d", round)
		sized.fake.Reset()
		plain.fake.Reset()
	}
}

func TestIdempotencyReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RejectField: "bad"}, nil)
	its := batch(1, 3, 1, "")
	its[1].Payload = json.RawMessage(`{"bad":true}`)
	first, err := b.push(t, its)
	require.NoError(t, err)
	require.Equal(t, []thirdparty.Rejection{{ID: "2", Error: "field bad is not allowed"}}, first.Rejected)

	// Rejection switched off: a retry under the same key still gets the
	// first answer, as a third party honouring the key would give.
	b.fake.SetConfig(fakethirdparty.Config{Now: b.clock.Now})
	again, err := b.push(t, its)
	require.NoError(t, err)
	require.Equal(t, first.Rejected, again.Rejected)

	reqs := b.fake.Requests()
	require.True(t, reqs[1].Replayed)
	st := b.fake.Stats()
	require.Equal(t, int64(1), st.KeyReplays)
	require.Equal(t, int64(2), st.ItemsAccepted)
	require.Equal(t, int64(1), st.ItemsRejected)
	require.Equal(t, int64(6), st.ItemsReceived)
	require.Zero(t, st.DuplicatePairs)
	require.Len(t, b.fake.Deliveries(), 2)

	// The same pairs under another key are accepted again: a duplicate.
	_, err = b.client.Push(t.Context(), "other-key", its)
	require.NoError(t, err)
	st = b.fake.Stats()
	require.Equal(t, int64(2), st.DuplicatePairs)
	require.Equal(t, int64(2), st.DuplicatesOtherKey)
	require.Zero(t, st.DuplicatesSameKey)
	require.Equal(t, int64(3), st.DistinctPairs)
}

func TestRefusalsAreNotReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1}, nil)
	its := batch(1, 2, 1, "")
	_, err := b.push(t, its)
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
	b.fake.SetConfig(fakethirdparty.Config{Now: b.clock.Now})
	_, err = b.push(t, its)
	require.NoError(t, err, "a 503 must not be remembered under the key")
	require.Equal(t, int64(2), b.fake.Stats().ItemsAccepted)
}

func TestIgnoreIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{IgnoreIdempotencyKey: true}, nil)
	its := batch(1, 4, 1, "")
	for range 3 {
		_, err := b.push(t, its)
		require.NoError(t, err)
	}
	st := b.fake.Stats()
	require.Zero(t, st.KeyReplays)
	require.Equal(t, int64(12), st.ItemsAccepted)
	require.Equal(t, int64(4), st.DistinctPairs)
	require.Equal(t, int64(8), st.DuplicatePairs)
	require.Equal(t, int64(8), st.DuplicatesSameKey)
	require.Zero(t, st.DuplicatesOtherKey)
	require.Len(t, b.fake.Deliveries(), 12)
}

func TestKeyConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	_, err := b.client.Push(t.Context(), "k1", batch(1, 2, 1, ""))
	require.NoError(t, err)
	_, err = b.client.Push(t.Context(), "k1", batch(1, 2, 2, ""))
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusUnprocessableEntity, e.StatusCode)
	require.Equal(t, int64(1), b.fake.Stats().KeyConflicts)
}

func TestOutOfOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	for i, v := range []int64{1, 3, 2, 3} {
		// A key per send, so the second 3 is a real duplicate, not a replay.
		_, err := b.client.Push(t.Context(), fmt.Sprint("k", i), batch(7, 1, v, ""))
		require.NoError(t, err)
	}
	st := b.fake.Stats()
	require.Equal(t, int64(1), st.OutOfOrder, "3 then 2 is out of order; 3 again is a duplicate")
	require.Equal(t, int64(1), st.DuplicatePairs)
	require.Equal(t, map[int64]int64{7: 3}, b.fake.Latest())
}

func TestAdminResetAndStatsRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	_, err := b.push(t, batch(1, 2, 1, ""))
	require.NoError(t, err)

	code, _, body := b.post(t, http.MethodGet, "/v1/stats", nil, "")
	require.Equal(t, http.StatusOK, code)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	for _, k := range []string{"requests", "requests_by_status", "items_received", "items_accepted", "items_rejected",
		"distinct_pairs", "duplicate_pairs", "duplicates_same_key", "duplicates_other_key", "key_replays",
		"out_of_order", "max_requests_in_one_second", "first_request_at", "last_request_at"} {
		require.Contains(t, st, k)
	}
	require.InDelta(t, 2, st["items_accepted"], 0)

	code, _, _ = b.post(t, http.MethodPost, "/v1/admin/reset", nil, "")
	require.Equal(t, http.StatusNoContent, code)
	require.Zero(t, b.fake.Stats().Requests)
	require.Empty(t, b.fake.Deliveries())
	require.Empty(t, b.fake.Latest())
	// The key was forgotten too: the same batch is accepted anew.
	_, err = b.push(t, batch(1, 2, 1, ""))
	require.NoError(t, err)
	require.Zero(t, b.fake.Stats().KeyReplays)
	require.Equal(t, int64(2), b.fake.Stats().ItemsAccepted)
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RejectField: "bad", Now: time.Now}, nil)
	const workers, perWorker, size = 8, 25, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for j := range perWorker {
				its := batch((w*perWorker+j)*size, size, 1, "")
				its[0].Payload = json.RawMessage(`{"bad":1}`)
				// Every batch is sent twice, as a retry would.
				for range 2 {
					res, err := b.push(t, its)
					if err != nil {
						t.Error(err)
						return
					}
					if len(res.Rejected) != 1 {
						t.Errorf("rejected %v", res.Rejected)
					}
				}
				_ = b.fake.Stats()
			}
		})
	}
	wg.Wait()
	st := b.fake.Stats()
	const batches = workers * perWorker
	require.Equal(t, int64(2*batches), st.Requests)
	require.Equal(t, int64(batches), st.KeyReplays)
	require.Equal(t, int64(batches*(size-1)), st.ItemsAccepted)
	require.Equal(t, int64(batches), st.ItemsRejected)
	require.Equal(t, int64(batches*(size-1)), st.DistinctPairs)
	require.Zero(t, st.DuplicatePairs)
	require.Len(t, b.fake.Deliveries(), batches*(size-1))
	require.Len(t, b.fake.Latest(), batches*(size-1))
}

func TestCloseReleasesHungRequests(t *testing.T) {
	t.Parallel()
	f := fakethirdparty.New(fakethirdparty.Config{TimeoutRate: 1})
	srv := httptest.NewServer(f)
	c, err := thirdparty.New(&thirdparty.Config{URL: srv.URL, Timeout: time.Minute})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := c.Push(t.Context(), "k", batch(1, 1, 1, ""))
		done <- err
	}()
	require.Eventually(t, func() bool { return f.Stats().Requests == 1 }, 5*time.Second, 5*time.Millisecond)
	f.Close()
	srv.Close()
	c.Close()
	require.Error(t, <-done)
}

func BenchmarkServeBatch(b *testing.B) {
	// A 500-item batch of ~300-byte payloads, as in the sync benchmarks.
	payload := `{"name":"` + strings.Repeat("a", 240) + `","count":12345,"tags":["x","y"]}`
	var body bytes.Buffer
	body.WriteString(`{"items":[`)
	for i := range 500 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"id":"%d","version":1,"payload":%s}`, 1_000_000+i, payload)
	}
	body.WriteString(`]}`)
	raw := body.Bytes()
	for _, cfg := range []struct {
		name string
		cfg  fakethirdparty.Config
	}{
		{"plain", fakethirdparty.Config{IgnoreIdempotencyKey: true}},
		{"reject_field", fakethirdparty.Config{IgnoreIdempotencyKey: true, RejectField: "secret"}},
	} {
		b.Run(cfg.name, func(b *testing.B) {
			f := fakethirdparty.New(cfg.cfg)
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%1000 == 0 {
					f.Reset() // keep the records from dominating memory
				}
				i++
				req := httptest.NewRequest(http.MethodPost, "/v1/batches", bytes.NewReader(raw))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				f.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code, rec.Body.String())
				}
			}
		})
	}
}
