package fakethirdparty_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

func TestValidation(t *testing.T) {
	t.Parallel()
	json := map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k"}
	tests := []struct {
		name   string
		method string
		header map[string]string
		body   string
		want   int
	}{
		{"ok", http.MethodPost, json, `{"items":[{"id":"1","version":1,"payload":{}}]}`, 200},
		{"content type with charset", http.MethodPost, map[string]string{"Content-Type": "application/json; charset=utf-8", "Idempotency-Key": "k2"}, `{"items":[{"id":"1","version":1,"payload":{}}]}`, 200},
		{"method", http.MethodPut, json, `{}`, 405},
		{"content type", http.MethodPost, map[string]string{"Content-Type": "text/plain", "Idempotency-Key": "k"}, `{}`, 415},
		{"no key", http.MethodPost, map[string]string{"Content-Type": "application/json"}, `{"items":[{"id":"1","version":1,"payload":{}}]}`, 400},
		{"not json", http.MethodPost, json, `{"items":`, 400},
		{"no items", http.MethodPost, json, `{}`, 400},
		{"empty items", http.MethodPost, json, `{"items":[]}`, 400},
		{"items not array", http.MethodPost, json, `{"items":{}}`, 400},
		{"numeric id", http.MethodPost, json, `{"items":[{"id":1,"version":1,"payload":{}}]}`, 400},
		{"text id (a source's key)", http.MethodPost, json, `{"items":[{"id":"x1","version":1,"payload":{}}]}`, 200},
		{"empty id", http.MethodPost, json, `{"items":[{"id":"","version":1,"payload":{}}]}`, 400},
		{"text id twice", http.MethodPost, json, `{"items":[{"id":"x","version":1,"payload":{}},{"id":"\u0078","version":2,"payload":{}}]}`, 400},
		{"no id", http.MethodPost, json, `{"items":[{"version":1,"payload":{}}]}`, 400},
		{"version 0", http.MethodPost, json, `{"items":[{"id":"1","version":0,"payload":{}}]}`, 400},
		{"version string", http.MethodPost, json, `{"items":[{"id":"1","version":"1","payload":{}}]}`, 400},
		{"no payload", http.MethodPost, json, `{"items":[{"id":"1","version":1}]}`, 400},
		{"repeated id", http.MethodPost, json, `{"items":[{"id":"1","version":1,"payload":{}},{"id":"1","version":2,"payload":{}}]}`, 400},
		{"bad payload json", http.MethodPost, json, `{"items":[{"id":"1","version":1,"payload":{"a":}}]}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{}, nil)
			code, _, body := b.post(t, tt.method, "/v1/batches", tt.header, tt.body)
			require.Equal(t, tt.want, code, body)
			st := b.fake.Stats()
			require.Equal(t, int64(1), st.Requests)
			require.Equal(t, int64(1), st.RequestsByStatus[fmt.Sprint(tt.want)])
			if tt.want != 200 {
				require.Zero(t, st.ItemsAccepted)
				require.Contains(t, body, `"error"`)
			}
		})
	}
}

func TestPooledBatchesDoNotLeakFields(t *testing.T) {
	t.Parallel()
	// A big valid batch, then a smaller one missing a field: reused decode
	// state must not fill the gap.
	b := setup(t, fakethirdparty.Config{}, nil)
	_, err := b.push(t, batch(1, 50, 1, ""))
	require.NoError(t, err)
	for range 20 {
		code, _, _ := b.post(t, http.MethodPost, "/v1/batches", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "z"},
			`{"items":[{"id":"900","version":1,"payload":{}},{"payload":{}}]}`)
		require.Equal(t, http.StatusBadRequest, code)
	}
}
