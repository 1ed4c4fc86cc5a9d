package delivery_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// testSecret is a signing secret in the Standard Webhooks form.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hubspot is the custom format of docs/protocol.md section  7's example, with
// versions in the bodies, as the fake's custom mode reads them.
var hubspot = custom.Config{
	Request:  custom.Request{Path: "/batch/upsert", Body: `{inputs: [.items[] | {id, version, properties: .payload}]}`},
	Deletes:  &custom.Request{Path: "/batch/archive", Body: `{inputs: [.items[] | {id, version}]}`},
	Accepted: `.status == 204 or .body.status == "COMPLETE"`,
	Rejected: `[.body.errors[]? | {id: .context.ids[0], error: .message}]`,
}

// formatCase is one format with where its requests go on the fake.
type formatCase struct {
	name string
	path string // appended to the fake's URL
	spec formats.Spec
}

var formatCases = []formatCase{
	{"syncer", "", formats.Spec{}},
	{"cloudevents", "/events", formats.Spec{Name: "cloudevents"}},
	{"elasticsearch", "/orders", formats.Spec{Name: "elasticsearch"}},
	{"standard-webhooks", "/hooks", formats.Spec{Name: "standard-webhooks", Settings: standardwebhooks.Settings{SigningSecret: formats.Secret{Value: testSecret}}}},
	{"custom", "/crm/v3/objects/contacts", formats.Spec{Name: "custom", Settings: hubspot}},
}

// formatSetup starts the fake speaking tc's format (with testSecret
// unless fakeCfg names another) and a Deliverer in it; tweaks change the
// Deliverer's configuration.
func formatSetup(t *testing.T, tc formatCase, fakeCfg fakethirdparty.Config, tweaks ...func(*delivery.Config)) (*fakethirdparty.Server, *delivery.Deliverer) {
	t.Helper()
	fakeCfg.Format, fakeCfg.SigningSecret = tc.name, cmp.Or(fakeCfg.SigningSecret, testSecret)
	fake := fakethirdparty.New(fakeCfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	f, err := formats.New(&tc.spec, installation)
	require.NoError(t, err)
	cfg := &delivery.Config{
		Format: f, BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, BreakerFailures: 1000,
		MaxInFlight: 8,
	}
	for _, tweak := range tweaks {
		tweak(cfg)
	}
	return fake, newDeliverer(t, newClient(t, srv.URL+tc.path, ""), nil, cfg)
}

const oddKey = "a/b c?#%é"

// mix is the same mix of writes for every format: inserts, one the third
// party refuses, updates, a delete, a re-inserted key, a text key with
// characters that need escaping everywhere.
func mix() [][]thirdparty.Item {
	p := func(s string) json.RawMessage { return json.RawMessage(s) }
	return [][]thirdparty.Item{
		{{ID: "1", Version: 1, Payload: p(`{"name":"one"}`)}, {ID: "2", Version: 1, Payload: p(`{"name":"two"}`)},
			{ID: oddKey, Version: 1, Payload: p(`{"name":"odd","n":12345678901234567890}`)}, {ID: "3", Version: 1, Payload: p(`{"bad":true}`)}},
		{{ID: "1", Version: 2, Payload: p(`{"name":"one again"}`)}, {ID: "2", Version: 2, Deleted: true}, {ID: oddKey, Version: 2, Payload: p(`{"name":"odd again"}`)}},
		{{ID: "2", Version: 3, Payload: p(`{"name":"two is back"}`)}, {ID: "4", Version: 1, Deleted: true}},
	}
}

func TestFormatsDeliverTheMix(t *testing.T) {
	t.Parallel()
	for _, tc := range formatCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake, d := formatSetup(t, tc, fakethirdparty.Config{RejectField: "bad", FailureRate: 0.3, Seed: 7})
			at := time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)
			var accepted, rejected int
			var texts []string
			for i, items := range mix() {
				b := delivery.Batch{Items: items, Salt: "s", Source: "orders", Time: at}
				if i == 1 {
					// A 429 on the way: nothing sent before it passes.
					fake.SetConfig(fakethirdparty.Config{Format: tc.name, SigningSecret: testSecret, RejectField: "bad", RateLimit: 50, RateBurst: 1, RetryAfter: time.Second})
				}
				out, err := d.Deliver(context.Background(), b)
				require.NoError(t, err)
				accepted += len(out.Accepted)
				rejected += len(out.Rejected)
				for _, r := range out.Rejected {
					texts = append(texts, r.Error)
					require.Equal(t, "3", r.Item.ID)
				}
				// The same batch again, as after a crash: same bodies under
				// the same keys, nothing taken twice.
				again, err := d.Deliver(context.Background(), b)
				require.NoError(t, err)
				require.Len(t, again.Accepted, len(out.Accepted))
			}
			require.Equal(t, 8, accepted)
			require.Equal(t, 1, rejected)
			require.Contains(t, texts[0], "field bad is not allowed", "the third party's own text")

			st := fake.Stats()
			require.Zero(t, st.KeyBodyConflicts, "one key, one body")
			require.Zero(t, st.KeyConflicts)
			require.Zero(t, st.OutOfOrder)
			require.Zero(t, st.DuplicatesOtherKey, "a resend goes under its key")
			require.Equal(t, map[int64]int64{1: 2, 2: 3, 4: 1}, fake.Latest())
			require.Equal(t, map[string]int64{oddKey: 2}, latestText(fake))
			t.Logf("%s: %d requests, by status %v", tc.name, st.Requests, st.RequestsByStatus)
		})
	}
}

// TestElasticsearchItemsPendingGoAgain: items answered 429 come back
// deferred, at once, beside their accepted neighbours; sent again alone
// (as the exporter does once their hold is due), they are accepted, and
// no accepted item ever goes twice.
func TestElasticsearchItemsPendingGoAgain(t *testing.T) {
	t.Parallel()
	fake, d := formatSetup(t, formatCases[2], fakethirdparty.Config{ItemTooManyRate: 0.5, Seed: 3})
	items := make([]thirdparty.Item, 40)
	for i := range items {
		items[i] = thirdparty.Item{ID: strconv.Itoa(i + 1), Version: 1, Payload: json.RawMessage(`{}`)}
	}
	accepted := 0
	for round := 0; len(items) > 0; round++ {
		require.Less(t, round, 40, "deferred items never accepted")
		out, err := d.Deliver(context.Background(), delivery.Batch{Items: items, Time: time.Unix(1, 0)})
		require.NoError(t, err)
		require.Equal(t, 1, out.Requests, "one request per send: deferred items do not go again inside Deliver")
		require.Empty(t, out.Rejected)
		accepted += len(out.Accepted)
		items = items[:0:0]
		for _, df := range out.Deferred {
			require.Contains(t, df.Reason, "429")
			items = append(items, df.Item)
		}
	}
	require.Equal(t, 40, accepted)
	require.Len(t, fake.Latest(), 40)
	require.Zero(t, fake.Stats().DuplicatePairs)
}

// TestFormatsHostileAnswersMarkNothing: an answer that is not one (an
// Elasticsearch bulk answer one item short, a custom accepted that says
// no) marks nothing and is retried until the Deliverer gives up.
func TestFormatsHostileAnswersMarkNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		tc     formatCase
		answer string
	}{
		{"elasticsearch items one short", formatCases[2], `{"took":1,"errors":false,"items":[{"index":{"_id":"1","status":201}}]}`},
		{"elasticsearch ids swapped", formatCases[2], `{"took":1,"errors":false,"items":[{"index":{"_id":"2","status":201}},{"index":{"_id":"1","status":201}}]}`},
		{"custom accepted says no", formatCases[4], `{"status":"PENDING","results":[]}`},
		{"custom rejects an id not sent", formatCases[4], `{"status":"COMPLETE","errors":[{"message":"x","context":{"ids":["99"]}}]}`},
		{"syncer html", formatCases[0], `<html>ok</html>`},
		// Formats whose 2xx needs no body can only be hostile otherwise:
		// a redirect (to a login page, say) is refused, never followed.
		{"cloudevents redirect", formatCases[1], "redirect"},
		{"standard-webhooks redirect", formatCases[3], "redirect"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.answer == "redirect" {
					http.Redirect(w, r, "/login", http.StatusFound)
					return
				}
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte(tt.answer))
			})
			f, err := formats.New(&tt.tc.spec, installation)
			require.NoError(t, err)
			d := newDeliverer(t, newClient(t, url+tt.tc.path, "tok"), nil, &delivery.Config{Format: f,
				BackoffInitial: time.Millisecond, BackoffMax: 2 * time.Millisecond, MaxElapsed: 50 * time.Millisecond, BreakerFailures: 1000})
			items := []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{}`)}, {ID: "2", Version: 1, Payload: json.RawMessage(`{}`)}}
			out, err := d.Deliver(context.Background(), delivery.Batch{Items: items, Time: time.Unix(1, 0)})
			require.Nil(t, out, "nothing marked")
			if tt.answer == "redirect" {
				require.ErrorIs(t, err, delivery.ErrConfiguration)
				return
			}
			require.ErrorIs(t, err, delivery.ErrGaveUp)
		})
	}
}

// TestFormatsHostileThirdParty: for every format, the third party at its
// worst on the shared push path: a redirect, a bare 429 on every request,
// a 413 for everything (a row too large for it), and answers that take
// 100 ms. Nothing is reported accepted that the third party did not
// accept, and the slow one accepts exactly what was sent.
func TestFormatsHostileThirdParty(t *testing.T) {
	t.Parallel()
	items := func() []thirdparty.Item {
		return []thirdparty.Item{
			{ID: "1", Version: 1, Payload: json.RawMessage(`{"big":"` + strings.Repeat("x", 64<<10) + `"}`)},
			{ID: "2", Version: 1, Payload: json.RawMessage(`{}`)},
		}
	}
	cfg := func(f delivery.Format) *delivery.Config {
		return &delivery.Config{Format: f, BackoffInitial: time.Millisecond, BackoffMax: 2 * time.Millisecond,
			MaxElapsed: 50 * time.Millisecond, BreakerFailures: 1000}
	}
	for _, tc := range formatCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := formats.New(&tc.spec, installation)
			require.NoError(t, err)
			deliver := func(t *testing.T, status int, timeout time.Duration) (*delivery.Outcome, error) {
				url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
					if status == http.StatusFound {
						http.Redirect(w, r, "/login", http.StatusFound)
						return
					}
					http.Error(w, "no", status)
				})
				d := newDeliverer(t, newClient(t, url+tc.path, "tok"), nil, cfg(f))
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				if status == http.StatusRequestEntityTooLarge {
					return deliverJudged(t, d, delivery.Batch{Items: items(), Time: time.Unix(1, 0)})
				}
				return d.Deliver(ctx, delivery.Batch{Items: items(), Time: time.Unix(1, 0)})
			}
			t.Run("redirect", func(t *testing.T) {
				out, err := deliver(t, http.StatusFound, 5*time.Second)
				require.Nil(t, out, "nothing marked")
				require.ErrorIs(t, err, delivery.ErrConfiguration)
			})
			t.Run("bare 429", func(t *testing.T) {
				out, err := deliver(t, http.StatusTooManyRequests, 300*time.Millisecond)
				require.Nil(t, out, "nothing marked")
				require.Error(t, err)
			})
			t.Run("413 for everything", func(t *testing.T) {
				out, err := deliver(t, http.StatusRequestEntityTooLarge, 5*time.Second)
				require.NoError(t, err)
				require.Empty(t, out.Accepted, "a refused row is never accepted")
				require.Len(t, out.Rejected, 2, "each row refused on its own, with the answer's text")
				require.Contains(t, out.Rejected[0].Error, "413")
			})
			t.Run("100 ms answers", func(t *testing.T) {
				fake, d := formatSetup(t, tc, fakethirdparty.Config{Latency: 100 * time.Millisecond})
				out, err := d.Deliver(context.Background(), delivery.Batch{Items: items(), Time: time.Unix(1, 0)})
				require.NoError(t, err)
				require.Len(t, out.Accepted, 2)
				require.Empty(t, out.Rejected)
				require.Equal(t, map[int64]int64{1: 1, 2: 1}, fake.Latest(), "the fake holds exactly what was accepted")
			})
		})
	}
}

// TestStandardWebhooksPerItemInFlight: one request per item, as many at
// once as MaxInFlight allows and no more.
func TestStandardWebhooksPerItemInFlight(t *testing.T) {
	t.Parallel()
	fake, d := formatSetup(t, formatCases[3], fakethirdparty.Config{Latency: 5 * time.Millisecond})
	items := make([]thirdparty.Item, 64)
	for i := range items {
		items[i] = thirdparty.Item{ID: strconv.Itoa(i + 1), Version: 1, Payload: json.RawMessage(`{"i":1}`)}
	}
	out, err := d.Deliver(context.Background(), delivery.Batch{Items: items, Time: time.Unix(1, 0)})
	require.NoError(t, err)
	require.Len(t, out.Accepted, 64)
	require.Equal(t, 64, out.Requests)
	st := fake.Stats()
	require.Equal(t, int64(64), st.Requests)
	require.LessOrEqual(t, st.MaxInFlight, int64(8))
	require.GreaterOrEqual(t, st.MaxInFlight, int64(4), "requests of one batch go concurrently")
	ids := make([]int, 0, 64)
	for id := range fake.Latest() {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	require.Len(t, ids, 64)
}

// TestCustomProgramFailureIsolatesTheRow: a body program that fails on one
// row's data sends the other rows and rejects that one with the program's
// error as its reason; one that fails on every row rejects nothing and
// holds the destination, which is its configuration's fault.
func TestCustomProgramFailureIsolatesTheRow(t *testing.T) {
	t.Parallel()
	f, err := formats.New(&formats.Spec{Name: "custom", Settings: custom.Config{Request: custom.Request{
		Body: `{rows: [.items[] | {id, total: (.payload.total | tonumber)}]}`}}}, installation)
	require.NoError(t, err)
	var mu sync.Mutex
	sent := 0
	url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	db := newDatabase(t)
	d := newDeliverer(t, newClient(t, url, ""), db.shared(t), &delivery.Config{Format: f,
		BackoffInitial: time.Millisecond, BackoffMax: 2 * time.Millisecond, MaxElapsed: 30 * time.Millisecond})
	items := []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{"total":"12"}`)},
		{ID: "2", Version: 1, Payload: json.RawMessage(`{"total":"abc"}`)},
		{ID: "3", Version: 1, Payload: json.RawMessage(`{"total":"14"}`)}}
	out, err := d.Deliver(context.Background(), delivery.Batch{Items: items})
	require.NoError(t, err)
	require.Len(t, out.Accepted, 2)
	require.Len(t, out.Rejected, 1)
	require.Equal(t, "2", out.Rejected[0].Item.ID)
	require.Contains(t, out.Rejected[0].Error, "request.body")
	require.Contains(t, out.Rejected[0].Error, "abc")
	require.Equal(t, 1, sent, "the good rows went together")

	bad := []thirdparty.Item{{ID: "4", Version: 1, Payload: json.RawMessage(`{"total":"x"}`)},
		{ID: "5", Version: 1, Payload: json.RawMessage(`{"total":"y"}`)},
		{ID: "6", Version: 1, Payload: json.RawMessage(`{"total":"z"}`)}}
	out, err = d.Deliver(context.Background(), delivery.Batch{Items: bad})
	require.Nil(t, out)
	require.True(t, errors.Is(err, delivery.ErrProgram), "%v", err)
	require.Equal(t, 1, sent)
}

// latestText is the highest version the fake accepted of each id that is
// not a decimal integer.
func latestText(f *fakethirdparty.Server) map[string]int64 {
	out := map[string]int64{}
	for _, d := range f.Deliveries() {
		if d.Text != "" && d.Version > out[d.Text] {
			out[d.Text] = d.Version
		}
	}
	return out
}

// TestStormProbeGoesAlone: a destination held for a rejection storm sends
// one request as its probe, and a batch of many requests (one per item,
// Standard Webhooks) sends the others only once the probe is accepted. A
// sibling request turned away while the probe is out must not cancel it:
// the hold would then never end.
func TestStormProbeGoesAlone(t *testing.T) {
	t.Parallel()
	tc := formatCases[3]
	// The receiver's secret is not the one the deliverer signs with.
	fakeCfg := fakethirdparty.Config{Format: tc.name, SigningSecret: "whsec_bmV3IHNlY3JldCBvZiB0aGUgcmVjZWl2ZXI=", SignatureStatus: http.StatusBadRequest}
	const probeEvery = 50 * time.Millisecond
	fake, d := formatSetup(t, tc, fakeCfg, func(c *delivery.Config) { c.AuthProbeInterval = probeEvery })
	batchOf := func(from int) delivery.Batch {
		items := make([]thirdparty.Item, 5)
		for i := range items {
			items[i] = thirdparty.Item{ID: strconv.Itoa(from + i), Version: 1, Payload: json.RawMessage(`{"i":1}`)}
		}
		return delivery.Batch{Items: items, Time: time.Unix(1, 0)}
	}
	// Three batches rejected whole for one reason make the storm.
	var err2 error
	for i := range 3 {
		_, err2 = d.Deliver(t.Context(), batchOf(i*5+1))
		require.Error(t, err2)
	}
	require.ErrorIs(t, err2, delivery.ErrRejectionStorm)

	// Held: each probe is one request, still rejected.
	for range 3 {
		time.Sleep(probeEvery + 10*time.Millisecond)
		before := fake.Stats().Requests
		_, err := d.Deliver(t.Context(), batchOf(1))
		require.ErrorIs(t, err, delivery.ErrRejectionStorm)
		require.Equal(t, before+1, fake.Stats().Requests, "a held destination is sent one request, the probe")
	}

	// The secret fixed: the next probe is accepted, and the rest of its
	// batch follows it.
	fakeCfg.SigningSecret = testSecret
	fake.SetConfig(fakeCfg)
	time.Sleep(probeEvery + 10*time.Millisecond)
	out, err := d.Deliver(t.Context(), batchOf(1))
	require.NoError(t, err)
	require.Len(t, out.Accepted, 5)
	require.Len(t, fake.Latest(), 5)
}
