package fakethirdparty_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// serve starts the fake with cfg behind an HTTP server closed at the
// test's end, and returns it with the server's URL.
func serve(t *testing.T, cfg fakethirdparty.Config) (*fakethirdparty.Server, string) {
	t.Helper()
	fake := fakethirdparty.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv.URL
}

func post(t *testing.T, url, contentType, body string, h http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Idempotency-Key", "k-"+strconv.Itoa(len(body)))
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestElasticsearchExternalVersions: a version the fake holds is 409, a
// delete of nothing 404, a rejected field 400 inside a 200.
func TestElasticsearchExternalVersions(t *testing.T) {
	t.Parallel()
	fake, url := serve(t, fakethirdparty.Config{Format: fakethirdparty.FormatElasticsearch, RejectField: "bad"})
	bulk := url + "/orders/_bulk"
	status, body := post(t, bulk, "application/x-ndjson",
		`{"index":{"_id":"1","version":2,"version_type":"external"}}`+"\n{}\n"+
			`{"index":{"_id":"2","version":1,"version_type":"external"}}`+"\n"+`{"bad":1}`+"\n"+
			`{"delete":{"_id":"3","version":4,"version_type":"external"}}`+"\n", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"took":0,"errors":true,"items":[
		{"index":{"_index":"fake","_id":"1","_version":2,"result":"created","status":201}},
		{"index":{"_index":"fake","_id":"2","status":400,"error":{"type":"mapper_parsing_exception","reason":"field bad is not allowed"}}},
		{"delete":{"_index":"fake","_id":"3","_version":4,"result":"not_found","status":404}}]}`, body)
	status, body = post(t, bulk, "application/x-ndjson", `{"index":{"_id":"1","version":1,"version_type":"external"}}`+"\n{}\n", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"status":409`)
	require.Equal(t, int64(1), fake.Stats().VersionConflicts)
	status, _ = post(t, url+"/orders/_search", "application/x-ndjson", `{}`+"\n", nil)
	require.Equal(t, http.StatusNotFound, status)
}

// TestStandardWebhooksSignatures: a request signed with the secret is
// accepted; a wrong signature or a stale timestamp is 401.
func TestStandardWebhooksSignatures(t *testing.T) {
	t.Parallel()
	fake, url := serve(t, fakethirdparty.Config{Format: fakethirdparty.FormatStandardWebhooks, SigningSecret: testSecret})
	key, err := standardwebhooks.ParseSecret(testSecret)
	require.NoError(t, err)
	body := `{"type":"orders.upserted","timestamp":"2026-11-24T13:00:00Z","data":{"id":"1","version":1,"payload":{}}}`
	signed := func(at time.Time, sig string) http.Header {
		ts := strconv.FormatInt(at.Unix(), 10)
		if sig == "" {
			sig = standardwebhooks.Signature(key, "msg_1", ts, []byte(body))
		}
		return http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig}}
	}
	status, _ := post(t, url+"/hooks", "application/json", body, signed(time.Now(), "v1,AAAA"))
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = post(t, url+"/hooks", "application/json", body, signed(time.Now().Add(-time.Hour), ""))
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = post(t, url+"/hooks", "application/json", body, signed(time.Now(), ""))
	require.Equal(t, http.StatusNoContent, status)
	require.Equal(t, int64(1), fake.Stats().ItemsAccepted)
}

// TestCustomAnswers207: a HubSpot-like batch with a refused input is
// answered 207 naming it; the others are accepted.
func TestCustomAnswers207(t *testing.T) {
	t.Parallel()
	fake, url := serve(t, fakethirdparty.Config{Format: fakethirdparty.FormatCustom, RejectField: "bad"})
	status, body := post(t, url+"/crm/batch/upsert", "application/json",
		`{"inputs":[{"id":"a","version":1,"properties":{}},{"id":"b","version":1,"properties":{"bad":1}}]}`, nil)
	require.Equal(t, http.StatusMultiStatus, status)
	require.JSONEq(t, `{"status":"COMPLETE","results":[{"id":"a"}],"errors":[{"status":"error","category":"VALIDATION_ERROR","message":"field bad is not allowed","context":{"ids":["b"]}}]}`, body)
	status, _ = post(t, url+"/crm/batch/archive", "application/json", `{"inputs":[{"id":"a","version":2}]}`, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, int64(2), fake.Stats().ItemsAccepted)
}
