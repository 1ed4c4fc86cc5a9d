package fakethirdparty_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// failingAndNot returns an id ItemFails picks at share and one it does not.
func failingAndNot(t *testing.T, share float64) (string, string) {
	t.Helper()
	var bad, good string
	for i := 0; bad == "" || good == ""; i++ {
		id := fmt.Sprintf("acct-%d", i)
		if fakethirdparty.ItemFails(id, share) {
			bad = id
		} else {
			good = id
		}
	}
	return bad, good
}

// TestItemFailShareElasticsearch: the ids ItemFailShare picks are answered
// 503 (or 429) item by item, at every request, while their neighbours are
// accepted; cleared, they are accepted.
func TestItemFailShareElasticsearch(t *testing.T) {
	t.Parallel()
	cfg := fakethirdparty.Config{Format: fakethirdparty.FormatElasticsearch, ItemFailShare: 0.2}
	fake, url := serve(t, cfg)
	bad, good := failingAndNot(t, 0.2)
	n := 0
	for i := range 1000 {
		if fakethirdparty.ItemFails(fmt.Sprintf("k%d", i), 0.2) {
			n++
		}
	}
	require.InDelta(t, 200, n, 50, "the share picks about its share of ids")
	bulk := func(version int) string {
		return fmt.Sprintf(`{"index":{"_id":%q,"version":%d,"version_type":"external"}}`+"\n{}\n", bad, version) +
			fmt.Sprintf(`{"index":{"_id":%q,"version":%d,"version_type":"external"}}`+"\n{}\n", good, version)
	}
	for v := 1; v <= 2; v++ {
		status, body := post(t, url+"/accounts/_bulk", "application/x-ndjson", bulk(v), nil)
		require.Equal(t, http.StatusOK, status)
		require.JSONEq(t, fmt.Sprintf(`{"took":0,"errors":true,"items":[
			{"index":{"_index":"fake","_id":%q,"status":503,"error":{"type":"unavailable_shards_exception","reason":"primary shard is not active"}}},
			{"index":{"_index":"fake","_id":%q,"_version":%d,"result":"created","status":201}}]}`, bad, good, v), body)
	}
	cfg.ItemFailStatus = http.StatusTooManyRequests
	fake.SetConfig(cfg)
	_, body := post(t, url+"/accounts/_bulk", "application/x-ndjson", bulk(3), nil)
	require.Contains(t, body, `"status":429`)
	require.Equal(t, int64(3), fake.Stats().ItemsAccepted)
	require.Equal(t, int64(3), fake.Stats().ItemFails)

	cfg.ItemFailShare = 0
	fake.SetConfig(cfg)
	_, body = post(t, url+"/accounts/_bulk", "application/x-ndjson", bulk(4), nil)
	require.Equal(t, 2, strings.Count(body, `"status":201`), body)
}

// TestItemFailShareWebhooks: in a format of one item a request, the item's
// status is the request's, not remembered for its webhook-id: the same
// request is accepted once the knob is cleared.
func TestItemFailShareWebhooks(t *testing.T) {
	t.Parallel()
	cfg := fakethirdparty.Config{Format: fakethirdparty.FormatStandardWebhooks, ItemFailShare: 0.5, ItemFailStatus: http.StatusNotFound}
	fake, url := serve(t, cfg)
	bad, good := failingAndNot(t, 0.5)
	hook := func(id string) (int, string) {
		body := fmt.Sprintf(`{"type":"orders.upserted","timestamp":"2026-11-24T13:00:00Z","data":{"id":%q,"version":1,"payload":{}}}`, id)
		return post(t, url+"/hooks", "application/json", body, http.Header{"Webhook-Id": {"msg_" + id}})
	}
	status, _ := hook(good)
	require.Equal(t, http.StatusNoContent, status)
	status, _ = hook(bad)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, int64(1), fake.Stats().ItemFails)
	cfg.ItemFailShare = 0
	fake.SetConfig(cfg)
	status, _ = hook(bad)
	require.Equal(t, http.StatusNoContent, status)
	require.Equal(t, int64(2), fake.Stats().ItemsAccepted)
}

// TestAnswerLoad: a custom answer carries "n" while AnswerLoad is set, and
// a replay of the same key once it is cleared comes without it.
func TestAnswerLoad(t *testing.T) {
	t.Parallel()
	cfg := fakethirdparty.Config{Format: fakethirdparty.FormatCustom, AnswerLoad: 1e9, Now: time.Now}
	fake, url := serve(t, cfg)
	body := `{"inputs":[{"id":"a","version":1,"properties":{}}]}`
	status, answer := post(t, url+"/crm/batch/upsert", "application/json", body, nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"n":1000000000,"status":"COMPLETE","results":[{"id":"a"}]}`, answer)
	cfg.AnswerLoad = 0
	fake.SetConfig(cfg)
	status, answer = post(t, url+"/crm/batch/upsert", "application/json", body, nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"status":"COMPLETE","results":[{"id":"a"}]}`, answer)
	require.Equal(t, int64(1), fake.Stats().KeyReplays)
}
