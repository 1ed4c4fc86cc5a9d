package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	syncerformat "github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
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

// installation is the installation id of every Deliverer in these tests.
const installation = "inst-test"

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
	t.Cleanup(fake.Close)
	return &testBundle{fake: fake, client: newClient(t, srv.URL, token), url: srv.URL}
}

// hostile starts a third party of the test's own.
func hostile(t *testing.T, h http.HandlerFunc) *thirdparty.Client {
	t.Helper()
	return newClient(t, hostileURL(t, h), "")
}

// hostileURL starts a third party of the test's own and returns its URL.
func hostileURL(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func newClient(t *testing.T, url, token string) *thirdparty.Client {
	t.Helper()
	client, err := thirdparty.New(&thirdparty.Config{URL: url, Token: token, Timeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return client
}

func newDeliverer(t *testing.T, client delivery.Client, store delivery.Store, cfg *delivery.Config) *delivery.Deliverer {
	t.Helper()
	c := delivery.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Installation == "" {
		c.Installation = installation
	}
	if c.Format == nil {
		c.Format = syncerformat.Format{}
	}
	d, err := delivery.New(client, store, &c)
	require.NoError(t, err)
	return d
}

func (b *testBundle) deliverer(t *testing.T, store delivery.Store, cfg *delivery.Config) *delivery.Deliverer {
	t.Helper()
	return newDeliverer(t, b.client, store, cfg)
}

// database is a migrated schema of its own; each shared() on it is another
// daemon's view of the same facts.
type database struct {
	dsn  string
	pool *pgxpool.Pool
}

func newDatabase(t *testing.T) *database {
	t.Helper()
	dsn, _ := dbtest.NewSchema(t)
	db := &database{dsn: dsn}
	db.pool = db.newPool(t)
	_, err := migrations.Up(context.Background(), db.pool, nil)
	require.NoError(t, err)
	return db
}

func (db *database) newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), db.dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// shared is a daemon's store, as the daemon builds it, on a pool of its own.
func (db *database) shared(t *testing.T) *breakerstore.Shared {
	t.Helper()
	s, err := breakerstore.New(db.newPool(t), nil)
	require.NoError(t, err)
	return breakerstore.NewShared(s, 0)
}

func (db *database) state(t *testing.T) breakerstore.State {
	t.Helper()
	st, err := breakerstore.ReadState(t.Context(), db.pool)
	require.NoError(t, err)
	return st
}

func items(from, n int, payload func(i int) string) []thirdparty.Item {
	out := make([]thirdparty.Item, n)
	for i := range out {
		p := fmt.Sprintf(`{"n":%d}`, from+i)
		if payload != nil {
			p = payload(from + i)
		}
		out[i] = thirdparty.Item{ID: strconv.Itoa(from + i), Version: 1, Payload: json.RawMessage(p)}
	}
	return out
}

func bodyKey(salt string, its []thirdparty.Item) string {
	return thirdparty.BatchKey(installation, salt, thirdparty.AppendBatch(nil, its))
}

// batch is a batch as the exporter gives it: body recorded, key derived.
func batch(salt string, its []thirdparty.Item) delivery.Batch {
	body := thirdparty.AppendBatch(nil, its)
	return delivery.Batch{Key: thirdparty.BatchKey(installation, salt, body), Salt: salt, Items: its, Body: body}
}

func ids(its []thirdparty.Item) []int64 {
	out := make([]int64, len(its))
	for i, it := range its {
		out[i] = rowID(it)
	}
	return out
}

// rowID is an item's id as the fake reports it: a row's.
func rowID(it thirdparty.Item) int64 {
	n, err := strconv.ParseInt(it.ID, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// requireOnlyAccepted checks that every item reported accepted was accepted
// by the fake: nothing is marked synced that the third party did not take.
func requireOnlyAccepted(t *testing.T, fake *fakethirdparty.Server, accepted []thirdparty.Item) {
	t.Helper()
	got := map[[2]int64]bool{}
	for _, d := range fake.Deliveries() {
		got[[2]int64{d.ID, d.Version}] = true
	}
	for _, it := range accepted {
		require.True(t, got[[2]int64{rowID(it), it.Version}], "item %d v%d reported accepted, the third party never took it", it.ID, it.Version)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	tests := []struct {
		name string
		cfg  delivery.Config
		want string
	}{
		{"format", delivery.Config{Installation: "i"}, "Format"},
		{"installation", delivery.Config{Format: syncerformat.Format{}}, "Installation"},
		{"rate", delivery.Config{Installation: "i", Format: syncerformat.Format{}, RateLimit: -1}, "RateLimit"},
		{"burst", delivery.Config{Installation: "i", Format: syncerformat.Format{}, RateBurst: -1}, "RateBurst"},
		{"in flight", delivery.Config{Installation: "i", Format: syncerformat.Format{}, MaxInFlight: -1}, "MaxInFlight"},
		{"retry after", delivery.Config{Installation: "i", Format: syncerformat.Format{}, MaxRetryAfter: -time.Second}, "MaxRetryAfter"},
		{"failures", delivery.Config{Installation: "i", Format: syncerformat.Format{}, BreakerFailures: -1}, "BreakerFailures"},
		{"open timeout", delivery.Config{Installation: "i", Format: syncerformat.Format{}, BreakerOpenTimeout: -time.Second}, "BreakerOpenTimeout"},
		{"max elapsed", delivery.Config{Installation: "i", Format: syncerformat.Format{}, MaxElapsed: -time.Second}, "MaxElapsed"},
		{"backoff order", delivery.Config{Installation: "i", Format: syncerformat.Format{}, BackoffInitial: 2 * time.Second, BackoffMax: time.Second}, "BackoffInitial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := delivery.New(b.client, nil, &tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err := delivery.New(b.client, nil, nil)
	require.ErrorContains(t, err, "Format", "a nil config is the zero config")
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
	requireOnlyAccepted(t, b.fake, out.Accepted)
}

// A source's text and uuid keys: rejections come back by the id's text,
// the rest is accepted, and a split (the fake refuses batches above two
// items) keeps every key as sent.
func TestDeliverTextKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{RejectField: "bad", MaxBatchItems: 2}, "")
	d := b.deliverer(t, nil, nil)
	its := []thirdparty.Item{
		{ID: "00000000-0000-4000-8000-000000000001", Version: 1, Payload: json.RawMessage(`{"ok":1}`)},
		{ID: "a \"quoted\" key", Version: 2, Payload: json.RawMessage(`{"bad":1}`)},
		{ID: "01", Version: 3, Deleted: true},
		{ID: "1", Version: 4, Payload: json.RawMessage(`{"bad":1}`)},
	}
	out, err := d.Deliver(t.Context(), batch("source:x", its))
	require.NoError(t, err)
	var accepted, rejected []string
	for _, it := range out.Accepted {
		accepted = append(accepted, it.ID)
	}
	for _, r := range out.Rejected {
		rejected = append(rejected, r.Item.ID)
		require.Equal(t, "field bad is not allowed", r.Error)
	}
	require.ElementsMatch(t, []string{"00000000-0000-4000-8000-000000000001", "01"}, accepted)
	require.ElementsMatch(t, []string{`a "quoted" key`, "1"}, rejected)
	got := map[string]bool{}
	for _, dl := range b.fake.Deliveries() {
		got[dl.Text] = true
	}
	require.Equal(t, map[string]bool{"00000000-0000-4000-8000-000000000001": true, "01": true}, got)
}

// The body given is the body sent, byte for byte, under the key given; a
// batch given only as a recorded body is decoded for its items.
func TestDeliverSendsTheRecordedBody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []string
	var keys []string
	client := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		buf := new(strings.Builder)
		_, _ = fmt.Fprint(buf, readAll(r))
		mu.Lock()
		bodies, keys = append(bodies, buf.String()), append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	d := newDeliverer(t, client, nil, nil)

	its := items(1, 3, func(int) string { return `{"big": 12345678901234567890, "u": "\u00e9"}` })
	body := thirdparty.AppendBatch(nil, its)
	out, err := d.Deliver(t.Context(), delivery.Batch{Key: "recorded-key", Body: body})
	require.NoError(t, err)
	require.Equal(t, ids(its), ids(out.Accepted))
	require.Equal(t, []string{string(body)}, bodies)
	require.Equal(t, []string{"recorded-key"}, keys)

	// Without a key, the key is the body's.
	_, err = d.Deliver(t.Context(), delivery.Batch{Salt: "s", Items: its})
	require.NoError(t, err)
	require.Equal(t, thirdparty.BatchKey(installation, "s", body), keys[1])

	// Hostile: a recorded body that is not one syncer wrote sends nothing.
	_, err = d.Deliver(t.Context(), delivery.Batch{Key: "k", Body: []byte(`{"items":[{"id":"1","version":1,"payload":1,"extra":1}]}`)})
	require.ErrorContains(t, err, "recorded body")
	require.Len(t, bodies, 2)
}

func readAll(r *http.Request) string {
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

// deliverJudged delivers b again while the deliverer keeps its rows
// pending to tell a rejection storm from bad rows (storm.go): a batch of
// fewer than five keys rejected whole fails after three tries.
func deliverJudged(t *testing.T, d *delivery.Deliverer, b delivery.Batch) (*delivery.Outcome, error) {
	t.Helper()
	for range 3 {
		out, err := d.Deliver(t.Context(), b)
		if !errors.Is(err, delivery.ErrWholeBatchRejected) {
			return out, err
		}
	}
	t.Fatal("a batch of fewer than three keys still kept pending after three tries")
	return nil, nil
}

// recorder is a slog.Handler that keeps what was logged.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

func (r *recorder) count(l slog.Level) int {
	n := 0
	for _, rec := range r.records() {
		if rec.Level == l {
			n++
		}
	}
	return n
}

func (r *recorder) countMsg(msg string) int {
	n := 0
	for _, rec := range r.records() {
		if rec.Message == msg {
			n++
		}
	}
	return n
}

func (r *recorder) countMsgLevel(msg string, l slog.Level) int {
	n := 0
	for _, rec := range r.records() {
		if rec.Message == msg && rec.Level == l {
			n++
		}
	}
	return n
}

// attr is attribute key of the first record with message msg.
func (r *recorder) attr(msg, key string) slog.Value {
	for _, rec := range r.records() {
		if rec.Message != msg {
			continue
		}
		var v slog.Value
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = a.Value
				return false
			}
			return true
		})
		return v
	}
	return slog.Value{}
}

// text is everything logged, messages and attributes.
func (r *recorder) text() string {
	var sb strings.Builder
	for _, rec := range r.records() {
		sb.WriteString(rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			sb.WriteString(" " + a.Key + "=" + a.Value.String())
			return true
		})
		sb.WriteString("\n")
	}
	return sb.String()
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	return context.WithCancel(t.Context())
}
