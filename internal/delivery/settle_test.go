package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// settleConfig is a Deliverer whose MaxElapsed is far longer than any
// test: an answer that waited for it would fail the test's deadline.
func settleConfig(t *testing.T, spec formats.Spec) *delivery.Config {
	t.Helper()
	f, err := formats.New(&spec, installation)
	require.NoError(t, err)
	return &delivery.Config{Format: f, BackoffInitial: 50 * time.Millisecond, BackoffMax: time.Second,
		MaxElapsed: time.Hour, BreakerFailures: 1000, AuthProbeInterval: time.Hour}
}

func settleItems(n int) []thirdparty.Item {
	its := make([]thirdparty.Item, n)
	for i := range its {
		its[i] = thirdparty.Item{ID: strconv.Itoa(i + 1), Version: 1, Payload: json.RawMessage(`{}`)}
	}
	return its
}

func itemIDs(its []thirdparty.Item) []string {
	out := make([]string, len(its))
	for i, it := range its {
		out[i] = it.ID
	}
	return out
}

// Issue 42, point 1: an Elasticsearch _bulk answered per item 201, 409,
// 400, 429, 503, 200, 404 settles in one round trip: the 201, 409 and 200
// accepted, the 400 and the index's 404 rejected, the 429 and 503
// deferred with their reasons, and no error, whatever MaxElapsed is.
func TestElasticsearchPerItemAnswersSettleAtOnce(t *testing.T) {
	t.Parallel()
	statuses := []int{201, 409, 400, 429, 503, 200, 404}
	var mu sync.Mutex
	requests := 0
	url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		requests++
		mu.Unlock()
		var items []string
		for i, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
			if i%2 == 1 {
				continue // the document
			}
			var action struct {
				Index struct {
					ID string `json:"_id"`
				} `json:"index"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &action))
			id := action.Index.ID
			n, _ := strconv.Atoi(id)
			s := statuses[n-1]
			entry := fmt.Sprintf(`{"index":{"_id":%q,"status":%d`, id, s)
			if s >= 400 {
				entry += fmt.Sprintf(`,"error":{"type":"t%d","reason":"r%d"}`, s, s)
			}
			items = append(items, entry+"}}")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"took":1,"errors":true,"items":[%s]}`, strings.Join(items, ","))
	})
	d := newDeliverer(t, newClient(t, url+"/orders", "tok"), nil, settleConfig(t, formats.Spec{Name: "elasticsearch"}))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	out, err := d.Deliver(ctx, delivery.Batch{Items: settleItems(7), Source: "orders", Time: time.Unix(1, 0)})
	require.NoError(t, err, "no wait for MaxElapsed, no error for the whole batch")
	require.Equal(t, 1, requests, "one round trip")
	require.ElementsMatch(t, []string{"1", "2", "6"}, itemIDs(out.Accepted))
	var rejected []string
	for _, r := range out.Rejected {
		rejected = append(rejected, r.Item.ID)
	}
	require.ElementsMatch(t, []string{"3", "7"}, rejected)
	require.Len(t, out.Deferred, 2)
	reasons := map[string]string{}
	for _, df := range out.Deferred {
		reasons[df.Item.ID] = df.Reason
	}
	require.Equal(t, "429 t429: r429", reasons["4"])
	require.Equal(t, "503 t503: r503", reasons["5"])
}

// Issue 42, point 2: Standard Webhooks, 20 rows of which one is answered
// 404 forever: the 19 others are accepted at once, the 404's row is
// deferred (the receiver does not know it), and the destination is not
// refused: the next batch goes.
func TestStandardWebhooksOneRow404IsTheRows(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]int{}
	url := hostileURL(t, func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Data struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		body, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(body, &ev))
		mu.Lock()
		got[ev.Data.ID]++
		mu.Unlock()
		if ev.Data.ID == "7" {
			http.Error(w, "unknown entity", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	d := newDeliverer(t, newClient(t, url, "tok"), nil, settleConfig(t, formats.Spec{Name: "standard-webhooks", Settings: standardwebhooks.Settings{SigningSecret: formats.Secret{Value: testSecret}}}))
	out, err := d.Deliver(t.Context(), delivery.Batch{Items: settleItems(20), Source: "orders", Time: time.Unix(1, 0)})
	require.NoError(t, err)
	require.Len(t, out.Accepted, 19)
	require.Len(t, out.Deferred, 1)
	require.Equal(t, "7", out.Deferred[0].Item.ID)
	require.Contains(t, out.Deferred[0].Reason, "404")

	// The held row alone, later: still the row's, the URL is known good.
	out, err = d.Deliver(t.Context(), delivery.Batch{Items: settleItems(20)[6:7], Source: "orders", Time: time.Unix(1, 0)})
	require.NoError(t, err)
	require.Len(t, out.Deferred, 1)

	// Ten more rows go.
	more := settleItems(30)[20:]
	out, err = d.Deliver(t.Context(), delivery.Batch{Items: more, Source: "orders", Time: time.Unix(2, 0)})
	require.NoError(t, err)
	require.Len(t, out.Accepted, 10)
	mu.Lock()
	defer mu.Unlock()
	for id, n := range got {
		if id != "7" {
			require.Equal(t, 1, n, "row %s sent once", id)
		}
	}
}

// A 404 to every per-item request, with nothing accepted, is still the
// URL's: a configuration refusal, nothing marked; and once the URL was
// good, a long streak of 404s with nothing accepted is the URL's again.
func TestStandardWebhooksEvery404IsTheURL(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	missing := true
	url := hostileURL(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if missing {
			http.Error(w, "no such route", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	cfg := settleConfig(t, formats.Spec{Name: "standard-webhooks", Settings: standardwebhooks.Settings{SigningSecret: formats.Secret{Value: testSecret}}})
	cfg.AuthProbeInterval = time.Millisecond
	d := newDeliverer(t, newClient(t, url, "tok"), nil, cfg)
	out, err := d.Deliver(t.Context(), delivery.Batch{Items: settleItems(5), Time: time.Unix(1, 0)})
	require.Nil(t, out)
	require.ErrorIs(t, err, delivery.ErrConfiguration)

	mu.Lock()
	missing = false
	mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	out, err = d.Deliver(t.Context(), delivery.Batch{Items: settleItems(2), Time: time.Unix(1, 0)})
	require.NoError(t, err)
	require.Len(t, out.Accepted, 2)

	mu.Lock()
	missing = true
	mu.Unlock()
	for i := range 8 {
		out, err = d.Deliver(t.Context(), delivery.Batch{Items: settleItems(10)[i : i+1], Time: time.Unix(1, 0)})
		require.NoError(t, err, "404 #%d after the URL was good: the row's", i+1)
		require.Len(t, out.Deferred, 1)
	}
	_, err = d.Deliver(t.Context(), delivery.Batch{Items: settleItems(10)[8:9], Time: time.Unix(1, 0)})
	require.ErrorIs(t, err, delivery.ErrConfiguration, "a ninth 404 in a row, nothing accepted: the URL's")
}
