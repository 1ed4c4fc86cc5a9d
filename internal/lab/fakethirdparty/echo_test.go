package fakethirdparty_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// EchoAuthorization: the token endpoint (the root's and a tenant's)
// refuses every grant quoting the Authorization and the form; lookups add
// the Authorization to every payload. Without it there is no token
// endpoint.
func TestEchoAuthorization(t *testing.T) {
	t.Parallel()
	fake := fakethirdparty.New(fakethirdparty.Config{EchoAuthorization: true, Lookup: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	post := func(path, auth, contentType, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"r/t+1"}}.Encode()
	for _, path := range []string{"/oauth/token", "/t/acme/oauth/token"} {
		code, body := post(path, "Basic aWQ6c2VjcmV0", "application/x-www-form-urlencoded", form)
		require.Equal(t, http.StatusUnauthorized, code, path)
		var got struct {
			Error            string `json:"error"`
			ErrorDescription string `json:"error_description"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.Equal(t, "invalid_client", got.Error)
		require.Equal(t, "you sent Authorization: Basic aWQ6c2VjcmV0 with the form "+form, got.ErrorDescription, path)
	}

	code, _ := post("/v1/batches", "Bearer tok", "application/json", `{"items":[{"id":"1","version":1,"payload":{"name":"a"}}]}`)
	require.Equal(t, http.StatusOK, code)
	code, body := post("/v1/lookup", "Bearer tok", "application/json", `{"ids":["1"]}`)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"items":[{"id":"1","version":1,"payload":{"name":"a","seen_authorization":"Bearer tok"}}]}`, body)

	plain := httptest.NewServer(fakethirdparty.New(fakethirdparty.Config{}))
	t.Cleanup(plain.Close)
	resp, err := http.Post(plain.URL+"/oauth/token", "application/x-www-form-urlencoded", strings.NewReader(form))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
