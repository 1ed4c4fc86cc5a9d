package standardwebhooks_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty/thirdpartytest"
)

// TestSignatureMatchesTheSpecificationsVector is the test vector of the
// specification's own libraries (TestWebhookSign).
func TestSignatureMatchesTheSpecificationsVector(t *testing.T) {
	t.Parallel()
	key, err := standardwebhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		standardwebhooks.Signature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`)))
}

func TestParseSecretRefusesOtherForms(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "sk_live_x"} {
		_, err := standardwebhooks.ParseSecret(s)
		require.ErrorIs(t, err, standardwebhooks.ErrSecret, "%q", s)
		if len(s) > 8 {
			require.NotContains(t, err.Error(), s)
		}
	}
}

// TestSignFreshBodyFixed: each send signs anew with its own timestamp;
// the body and the id do not change.
func TestSignFreshBodyFixed(t *testing.T) {
	t.Parallel()
	f, err := standardwebhooks.New("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	b := &thirdparty.Batch{Source: "orders", Time: time.Unix(1700000000, 0), Items: []thirdparty.Item{{ID: "42", Version: 3, Payload: json.RawMessage(`{"a":1}`)}}}
	reqs, err := f.Requests(b)
	require.NoError(t, err)
	require.Len(t, reqs, 1)
	require.Equal(t, `{"type":"orders.upserted","timestamp":"2023-11-14T22:13:20Z","data":{"id":"42","version":3,"payload":{"a":1}}}`, string(reqs[0].Body))
	h1, h2 := http.Header{}, http.Header{}
	reqs[0].Sign(h1, "key-1", reqs[0].Body, time.Unix(1700000001, 0))
	reqs[0].Sign(h2, "key-1", reqs[0].Body, time.Unix(1700000060, 0))
	require.Equal(t, "key-1", h1.Get("Webhook-Id"))
	require.Equal(t, h1.Get("Webhook-Id"), h2.Get("Webhook-Id"))
	require.Equal(t, "1700000001", h1.Get("Webhook-Timestamp"))
	require.NotEqual(t, h1.Get("Webhook-Signature"), h2.Get("Webhook-Signature"))
	// The format's signer keeps HMAC states between sends: every one of
	// its signatures is still the plain computation's.
	key, err := standardwebhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	for i := range 3 {
		h := http.Header{}
		ts := time.Unix(1700000000+int64(i), 0)
		reqs[0].Sign(h, "key-2", reqs[0].Body, ts)
		require.Equal(t, standardwebhooks.Signature(key, "key-2", h.Get("Webhook-Timestamp"), reqs[0].Body), h.Get("Webhook-Signature"))
	}
}

func TestReadRejectsUnnamed4xx(t *testing.T) {
	t.Parallel()
	f, err := standardwebhooks.New("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	r := &thirdparty.Request{IDs: []string{"42"}}
	for status, want := range map[int]string{400: "reject", 422: "reject", 418: "reject", 401: "auth", 404: "config", 409: "transient", 413: "batch_refused", 429: "rate_limited", 503: "transient", 204: "accept"} {
		res, err := f.Read(r, thirdpartytest.Answer(status, http.Header{}, []byte(`{"error":"nope"}`)))
		switch want {
		case "accept":
			require.NoError(t, err)
			require.Empty(t, res.Rejected)
		case "reject":
			require.NoError(t, err, "%d", status)
			require.Len(t, res.Rejected, 1)
			require.Contains(t, res.Rejected[0].Error, "nope")
		default:
			require.Equal(t, want, thirdparty.Classify(err).String(), "%d", status)
		}
	}
}
