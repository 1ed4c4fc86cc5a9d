package conformance

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats"
	syncerwebhooks "github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// secret is a signing secret in the specification's form.
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

const oddKey = "a/b c?#%é"

// items are inserts, an update's later version, a text key that needs
// escaping everywhere, and a tombstone.
func items() []thirdparty.Item {
	return []thirdparty.Item{
		{ID: "1", Version: 1, Payload: json.RawMessage(`{"name":"one","n":12345678901234567890}`)},
		{ID: "2", Version: 7, Payload: json.RawMessage(`{"name":"two","tags":["a","b"]}`)},
		{ID: oddKey, Version: 3, Payload: json.RawMessage(`{"name":"odd \u00e9\n"}`)},
		{ID: "4", Version: 9, Deleted: true},
	}
}

func deliverer(t *testing.T, url string, spec *formats.Spec) *delivery.Deliverer {
	t.Helper()
	return delivererEnv(t, url, spec, &formats.Env{})
}

// delivererEnv is deliverer with env's secrets: a file read again, as the
// daemon reads one.
func delivererEnv(t *testing.T, url string, spec *formats.Spec, env *formats.Env) *delivery.Deliverer {
	t.Helper()
	env.Installation = "inst-conformance"
	f, err := formats.Build(spec, env)
	require.NoError(t, err)
	client, err := thirdparty.New(&thirdparty.Config{URL: url, Timeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	d, err := delivery.New(client, nil, &delivery.Config{Installation: "inst-conformance", Format: f,
		BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond, MaxElapsed: time.Second})
	require.NoError(t, err)
	return d
}

// TestStandardWebhooksVerifiedBySpecLibrary: every request verifies with
// the specification's own Go library (signature and timestamp), its body
// is the contract's, and a resend keeps webhook-id and body with a fresh
// timestamp and signature.
func TestStandardWebhooksVerifiedBySpecLibrary(t *testing.T) {
	t.Parallel()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	type seen struct {
		id, ts, sig string
		body        []byte
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := wh.Verify(body, r.Header); err != nil {
			http.Error(w, "verification failed: "+err.Error(), http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost || r.URL.Path != "/hooks" {
			http.Error(w, "not as the contract says", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, seen{r.Header.Get("Webhook-Id"), r.Header.Get("Webhook-Timestamp"), r.Header.Get("Webhook-Signature"), body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	d := deliverer(t, srv.URL+"/hooks", &formats.Spec{Name: "standard-webhooks", Settings: syncerwebhooks.Settings{SigningSecret: formats.Secret{Value: secret}}})

	at := time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)
	batch := delivery.Batch{Items: items(), Salt: "s", Source: "orders", Time: at}
	out, err := d.Deliver(context.Background(), batch)
	require.NoError(t, err)
	require.Len(t, out.Accepted, 4, "every request verified")
	require.Len(t, got, 4)

	byID := map[string]seen{}
	for _, s := range got {
		var m struct {
			Type      string         `json:"type"`
			Timestamp string         `json:"timestamp"`
			Data      map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(s.body, &m))
		require.Equal(t, "2026-11-24T13:00:00Z", m.Timestamp, "the batch's recorded time")
		id := m.Data["id"].(string)
		byID[id] = s
		if id == "4" {
			require.Equal(t, "orders.deleted", m.Type)
			require.Equal(t, true, m.Data["deleted"])
			require.NotContains(t, m.Data, "payload")
		} else {
			require.Equal(t, "orders.upserted", m.Type)
			require.Contains(t, m.Data, "payload")
		}
	}
	require.Contains(t, string(byID["1"].body), `12345678901234567890`, "payloads pass through untouched")
	require.Contains(t, byID, oddKey)

	// A resend (after a crash) a second later: the same webhook-id and
	// body, a fresh timestamp and signature, verified again.
	time.Sleep(1100 * time.Millisecond)
	got = nil
	_, err = d.Deliver(context.Background(), batch)
	require.NoError(t, err)
	require.Len(t, got, 4)
	for _, s := range got {
		var m struct {
			Data map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(s.body, &m))
		first := byID[m.Data["id"].(string)]
		require.Equal(t, first.id, s.id)
		require.Equal(t, string(first.body), string(s.body))
		require.NotEqual(t, first.ts, s.ts)
		require.NotEqual(t, first.sig, s.sig)
	}
}

// TestStandardWebhooksWrongSecretRefused: the library refuses a request
// signed with another secret, and syncer reads the 401 as refused
// credentials: nothing marked, nothing failed.
func TestStandardWebhooksWrongSecretRefused(t *testing.T) {
	t.Parallel()
	wh, err := standardwebhooks.NewWebhook("whsec_" + "c2VjcmV0LW9mLWFub3RoZXItcmVjZWl2ZXI=")
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if wh.Verify(body, r.Header) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	d := deliverer(t, srv.URL, &formats.Spec{Name: "standard-webhooks", Settings: syncerwebhooks.Settings{SigningSecret: formats.Secret{Value: secret}}})
	out, err := d.Deliver(context.Background(), delivery.Batch{Items: items()[:1], Time: time.Now()})
	require.Nil(t, out)
	require.ErrorIs(t, err, delivery.ErrCredentials)
}

// TestCloudEventsReadBySDK: each batch is read by the CloudEvents Go SDK
// as a batch of valid events with the contract's attributes.
func TestCloudEventsReadBySDK(t *testing.T) {
	t.Parallel()
	type event struct {
		id, source, typ, subject, contentType string
		time                                  time.Time
		data                                  []byte
	}
	var mu sync.Mutex
	var got []event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		events, err := cehttp.NewEventsFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if err := e.Validate(); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			got = append(got, event{e.ID(), e.Source(), e.Type(), e.Subject(), e.DataContentType(), e.Time(), e.Data()})
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	d := deliverer(t, srv.URL, &formats.Spec{Name: "cloudevents"})
	at := time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)
	out, err := d.Deliver(context.Background(), delivery.Batch{Items: items(), Source: "orders", Time: at})
	require.NoError(t, err)
	require.Len(t, out.Accepted, 4)
	require.Equal(t, 1, out.Requests, "one request per batch")
	require.Len(t, got, 4)
	for _, e := range got {
		require.Equal(t, "urn:syncer:inst-conformance:orders", e.source)
		require.True(t, e.time.Equal(at))
	}
	require.Equal(t, "1:1", got[0].id)
	require.Equal(t, "syncer.orders.upserted", got[0].typ)
	require.Equal(t, "1", got[0].subject)
	require.Equal(t, "application/json", got[0].contentType)
	require.JSONEq(t, `{"name":"one","n":12345678901234567890}`, string(got[0].data))
	require.Equal(t, oddKey+":3", got[2].id)
	require.Equal(t, oddKey, got[2].subject)
	require.Equal(t, "4:9", got[3].id)
	require.Equal(t, "syncer.orders.deleted", got[3].typ)
	require.Empty(t, got[3].data, "a tombstone has no data")
}

// TestStandardWebhooksSecretRotation: the signing secret rotated as the
// specification allows, old, then "old new" while receivers move, then
// new: during the overlap a receiver holding either secret verifies every
// request with the specification's library; after it, only the new one.
func TestStandardWebhooksSecretRotation(t *testing.T) {
	t.Parallel()
	const next = "whsec_" + "bmV4dC1zZWNyZXQtYWZ0ZXItcm90YXRpb24="
	oldWH, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	newWH, err := standardwebhooks.NewWebhook(next)
	require.NoError(t, err)
	var mu sync.Mutex
	verified := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		if oldWH.Verify(body, r.Header) == nil {
			verified["old"]++
		}
		if newWH.Verify(body, r.Header) == nil {
			verified["new"]++
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	var current sync.Map
	current.Store("s", secret)
	d := delivererEnv(t, srv.URL, &formats.Spec{Name: "standard-webhooks",
		Settings: syncerwebhooks.Settings{SigningSecret: formats.Secret{Field: "signing_secret", File: "rotating", Value: secret}}},
		&formats.Env{Secret: func(formats.Secret) (func() string, error) {
			return func() string { v, _ := current.Load("s"); return v.(string) }, nil
		}})
	phase := func(secrets string, salt string) map[string]int {
		current.Store("s", secrets)
		mu.Lock()
		clear(verified)
		mu.Unlock()
		_, err := d.Deliver(context.Background(), delivery.Batch{Items: items(), Salt: salt, Source: "orders", Time: time.Now()})
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{"old": verified["old"], "new": verified["new"]}
	}
	require.Equal(t, map[string]int{"old": 4, "new": 0}, phase(secret, "a"))
	require.Equal(t, map[string]int{"old": 4, "new": 4}, phase(secret+" "+next, "b"), "both receivers verify during the overlap")
	require.Equal(t, map[string]int{"old": 0, "new": 4}, phase(next, "c"))
}
