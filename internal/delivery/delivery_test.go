package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	)
}

type testBundle struct {
	fake   *fakethirdparty.Server
	client *thirdparty.Client
	url    string
}

func setup(t *testing.T, fakeCfg fakethirdparty.Config, token string) *testBundle {
	t.Helper()
	fake := fakethirdparty.New(fakeCfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	client, err := thirdparty.New(&thirdparty.Config{URL: srv.URL, Token: token, Timeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return &testBundle{fake: fake, client: client, url: srv.URL}
}

func (b *testBundle) deliverer(t *testing.T, store gobreaker.SharedDataStore, cfg *delivery.Config) *delivery.Deliverer {
	t.Helper()
	d, err := delivery.New(b.client, store, cfg)
	require.NoError(t, err)
	return d
}

// sharedStore returns a breakerstore on a migrated fresh schema, and the
// pool under it.
func sharedStore(t *testing.T) (*breakerstore.Store, *pgxpool.Pool) {
	t.Helper()
	dsn, schema := dbtest.NewSchema(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = migrations.Up(context.Background(), pool, nil)
	require.NoError(t, err)
	s, err := breakerstore.New(pool, &breakerstore.Config{Schema: schema})
	require.NoError(t, err)
	return s, pool
}

func items(from, n int, payload func(i int) string) []thirdparty.Item {
	out := make([]thirdparty.Item, n)
	for i := range out {
		p := fmt.Sprintf(`{"n":%d}`, from+i)
		if payload != nil {
			p = payload(from + i)
		}
		out[i] = thirdparty.Item{ID: int64(from + i), Version: 1, Payload: json.RawMessage(p)}
	}
	return out
}

func batch(salt string, its []thirdparty.Item) delivery.Batch {
	return delivery.Batch{Key: thirdparty.IdempotencyKey(salt, its), Salt: salt, Items: its}
}

func ids(its []thirdparty.Item) []int64 {
	out := make([]int64, len(its))
	for i, it := range its {
		out[i] = it.ID
	}
	return out
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	tests := []struct {
		name string
		cfg  delivery.Config
		want string
	}{
		{"rate", delivery.Config{RateLimit: -1}, "RateLimit"},
		{"burst", delivery.Config{RateBurst: -1}, "RateBurst"},
		{"failures", delivery.Config{BreakerFailures: -1}, "BreakerFailures"},
		{"open timeout", delivery.Config{BreakerOpenTimeout: -time.Second}, "BreakerOpenTimeout"},
		{"max elapsed", delivery.Config{MaxElapsed: -time.Second}, "MaxElapsed"},
		{"backoff order", delivery.Config{BackoffInitial: 2 * time.Second, BackoffMax: time.Second}, "BackoffInitial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := delivery.New(b.client, nil, &tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestDeliverPartialSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RejectField: "bad"}, "")
	d := b.deliverer(t, nil, nil)

	its := items(1, 6, func(i int) string {
		if i%3 == 0 {
			return `{"bad": 1}`
		}
		return `{"ok": 1}`
	})
	out, err := d.Deliver(t.Context(), batch("", its))
	require.NoError(t, err)
	require.Equal(t, 1, out.Requests)
	require.Equal(t, []int64{1, 2, 4, 5}, ids(out.Accepted))
	require.Len(t, out.Rejected, 2)
	for _, r := range out.Rejected {
		require.Equal(t, "field bad is not allowed", r.Error)
	}
}

func TestSplitOnTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{MaxBatchItems: 3}, "")
	d := b.deliverer(t, nil, nil)

	its := items(1, 10, nil)
	out, err := d.Deliver(t.Context(), batch("s1", its))
	require.NoError(t, err)
	require.Empty(t, out.Rejected)
	require.ElementsMatch(t, ids(its), ids(out.Accepted))
	st := b.fake.Stats()
	require.EqualValues(t, 10, st.DistinctPairs)
	require.Zero(t, st.DuplicatePairs)

	// The halves' keys derive from the salt and their content: a resend
	// after a crash takes the same path under the same keys.
	firstKeys := map[string]bool{}
	for _, r := range b.fake.Requests() {
		firstKeys[r.Key] = true
	}
	require.True(t, firstKeys[thirdparty.IdempotencyKey("s1", its[:5])])
	require.True(t, firstKeys[thirdparty.IdempotencyKey("s1", its[5:])])
	_, err = d.Deliver(t.Context(), batch("s1", its))
	require.NoError(t, err)
	for _, r := range b.fake.Requests()[len(firstKeys):] {
		require.True(t, firstKeys[r.Key], "resend used a new key %s", r.Key)
	}
	require.Zero(t, b.fake.Stats().DuplicatePairs)
}

func TestPoisonItemIsRejectedAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{PoisonField: "poison"}, "")
	d := b.deliverer(t, nil, nil)

	its := items(1, 9, func(i int) string {
		if i == 6 {
			return `{"poison": true}`
		}
		return `{"ok": 1}`
	})
	out, err := d.Deliver(t.Context(), batch("", its))
	require.NoError(t, err)
	require.Len(t, out.Rejected, 1)
	require.Equal(t, int64(6), out.Rejected[0].Item.ID)
	require.Equal(t, "refused as a whole: 400 batch holds an item with field poison", out.Rejected[0].Error)
	require.Len(t, out.Accepted, 8)
	require.EqualValues(t, 8, b.fake.Stats().DistinctPairs)
}

func TestRateLimitedInline(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RateLimit: 0.5, RateBurst: 1, RetryAfter: time.Second}, "")
	d := b.deliverer(t, nil, nil)

	for i := range 2 {
		_, err := d.Deliver(t.Context(), batch("", items(i+1, 1, nil)))
		require.NoError(t, err)
	}
	reqs := b.fake.Requests()
	require.GreaterOrEqual(t, len(reqs), 3)
	for i, r := range reqs {
		if r.Status == 429 {
			require.Less(t, i+1, len(reqs))
			gap := reqs[i+1].At.Sub(r.At)
			require.GreaterOrEqual(t, gap, 990*time.Millisecond, "request %d came %s after a 429 asking for 1s", i+1, gap)
		}
	}
}

func TestRateLimitedLongWaitIsReturned(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RateLimit: 0.1, RateBurst: 1, RetryAfter: 3 * time.Second}, "")
	d := b.deliverer(t, nil, &delivery.Config{MaxInlineWait: 500 * time.Millisecond, BreakerFailures: 1})

	_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
	require.NoError(t, err)
	_, err = d.Deliver(t.Context(), batch("", items(2, 1, nil)))
	var we *delivery.WaitError
	require.ErrorAs(t, err, &we)
	require.InDelta(t, 3*time.Second, we.RetryAfter(), float64(200*time.Millisecond))
	var tpErr *thirdparty.Error
	require.ErrorAs(t, err, &tpErr)
	require.True(t, tpErr.RateLimited())

	// Until the gate opens, nothing is sent at all, and the 429 did not
	// count against the breaker (one failure would have opened it).
	_, err = d.Deliver(t.Context(), batch("", items(3, 1, nil)))
	require.ErrorAs(t, err, &we)
	require.ErrorAs(t, err, &tpErr)
	require.Len(t, b.fake.Requests(), 2)
}

func TestRateLimiterPaces(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	d := b.deliverer(t, nil, &delivery.Config{RateLimit: 40, RateBurst: 1})

	start := time.Now()
	for i := range 21 {
		_, err := d.Deliver(t.Context(), batch("", items(i+1, 1, nil)))
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, time.Since(start), 490*time.Millisecond)
}

func TestBreakerOpensAndIsShared(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1}, "")
	store, pool := sharedStore(t)
	cfg := &delivery.Config{BreakerFailures: 3, BreakerOpenTimeout: 2 * time.Second, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond}
	d := b.deliverer(t, store, cfg)

	_, err := d.Deliver(t.Context(), batch("", items(1, 2, nil)))
	var we *delivery.WaitError
	require.ErrorAs(t, err, &we)
	require.ErrorIs(t, err, delivery.ErrBreakerOpen)
	require.InDelta(t, 2*time.Second, we.RetryAfter(), float64(300*time.Millisecond))
	require.Len(t, b.fake.Requests(), 3)

	// status reads the breaker where gobreaker stores it.
	require.Equal(t, delivery.BreakerStateKey, status.KeyBreaker)
	r, err := status.Gather(t.Context(), pool, nil)
	require.NoError(t, err)
	require.Equal(t, "open", r.Breaker.State)
	require.WithinDuration(t, time.Now().Add(2*time.Second), r.Breaker.Until, 500*time.Millisecond)

	// A Deliverer of another daemon on the same store inherits the open
	// breaker and sends nothing.
	d2 := b.deliverer(t, store, cfg)
	_, err = d2.Deliver(t.Context(), batch("", items(1, 2, nil)))
	require.ErrorIs(t, err, delivery.ErrBreakerOpen)
	require.Len(t, b.fake.Requests(), 3)

	// After the timeout one probe goes through; it succeeds and closes.
	b.fake.SetConfig(fakethirdparty.Config{})
	time.Sleep(we.RetryAfter())
	out, err := d2.Deliver(t.Context(), batch("", items(1, 2, nil)))
	require.NoError(t, err)
	require.Len(t, out.Accepted, 2)
	r, err = status.Gather(t.Context(), pool, nil)
	require.NoError(t, err)
	require.Equal(t, "closed", r.Breaker.State)
}

func TestRefusalsDoNotTripTheBreaker(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{PoisonField: "poison"}, "")
	d := b.deliverer(t, nil, &delivery.Config{BreakerFailures: 1})
	its := items(1, 4, func(int) string { return `{"poison": 1}` })
	out, err := d.Deliver(t.Context(), batch("", its))
	require.NoError(t, err)
	require.Len(t, out.Rejected, 4)
	out, err = d.Deliver(t.Context(), batch("", items(10, 2, nil)))
	require.NoError(t, err)
	require.Len(t, out.Accepted, 2)
}

func TestGivesUpAfterMaxElapsed(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1}, "")
	d := b.deliverer(t, nil, &delivery.Config{
		BreakerFailures: 1000, BackoffInitial: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		MaxElapsed: 300 * time.Millisecond, GaveUpSnooze: 7 * time.Second,
	})
	its := items(1, 3, nil)
	_, err := d.Deliver(t.Context(), batch("", its))
	var we *delivery.WaitError
	require.ErrorAs(t, err, &we)
	require.ErrorIs(t, err, delivery.ErrGaveUp)
	require.Equal(t, 7*time.Second, we.RetryAfter())
	reqs := b.fake.Requests()
	require.Greater(t, len(reqs), 2)
	for _, r := range reqs {
		require.Equal(t, thirdparty.IdempotencyKey("", its), r.Key, "every retry under the same key")
	}
}

func TestContextEndsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{FailureRate: 1}, "")
	d := b.deliverer(t, nil, &delivery.Config{BreakerFailures: 1000, BackoffInitial: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := d.Deliver(ctx, batch("", items(1, 1, nil)))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestCredentialsRefusedThenAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Token: "right"}, "wrong")
	store, pool := sharedStore(t)
	d := b.deliverer(t, store, &delivery.Config{State: store, AuthProbeInterval: 3 * time.Second, BreakerFailures: 1})

	for range 2 {
		_, err := d.Deliver(t.Context(), batch("", items(1, 2, nil)))
		var we *delivery.WaitError
		require.ErrorAs(t, err, &we)
		require.ErrorIs(t, err, delivery.ErrCredentials)
		require.Equal(t, 3*time.Second, we.RetryAfter())
		require.NotContains(t, err.Error(), "right")
	}
	r, err := status.Gather(t.Context(), pool, nil)
	require.NoError(t, err)
	require.True(t, r.Credentials.Refused)
	require.Equal(t, "third party answered 401", r.Credentials.Message)
	require.False(t, r.Credentials.Since.IsZero())
	require.Equal(t, "closed", r.Breaker.State, "401s do not trip the breaker")

	b.fake.SetConfig(fakethirdparty.Config{Token: "wrong"})
	out, err := d.Deliver(t.Context(), batch("", items(1, 2, nil)))
	require.NoError(t, err)
	require.Len(t, out.Accepted, 2)
	r, err = status.Gather(t.Context(), pool, nil)
	require.NoError(t, err)
	require.False(t, r.Credentials.Refused)
}

func TestLogsCredentialTransitionsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Token: "right"}, "wrong")
	logs := &recorder{}
	d := b.deliverer(t, nil, &delivery.Config{Logger: slog.New(logs)})
	for range 3 {
		_, err := d.Deliver(t.Context(), batch("", items(1, 1, nil)))
		require.ErrorIs(t, err, delivery.ErrCredentials)
	}
	b.fake.SetConfig(fakethirdparty.Config{})
	for i := range 3 {
		_, err := d.Deliver(t.Context(), batch("", items(i+1, 1, nil)))
		require.NoError(t, err)
	}
	require.Equal(t, 1, logs.count(slog.LevelError))
	require.Equal(t, 1, logs.countMsg("delivery: credentials accepted again"))
}

type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) count(l slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Level == l {
			n++
		}
	}
	return n
}

func (r *recorder) countMsg(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Message == msg {
			n++
		}
	}
	return n
}
