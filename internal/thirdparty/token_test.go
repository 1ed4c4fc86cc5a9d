package thirdparty_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// A token endpoint's refusal is named as the endpoint's (its URL without
// the query, its status), never as the destination's answer to a push:
// no request reaches the destination, and a 400 invalid_client refuses
// the credentials rather than the batch (which would be split).
func TestTokenEndpointRefusalIsTheEndpoints(t *testing.T) {
	t.Parallel()
	var pushed atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		pushed.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(api.Close)
	status := http.StatusBadRequest
	token := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":"invalid_client","error_description":"client authentication failed"}`)
	}))
	t.Cleanup(token.Close)
	oauth, err := credentials.NewOAuth2(credentials.OAuth2Config{TokenURL: token.URL + "/oauth/token?tenant=secret-tenant",
		ClientID: credentials.Literal("id", "the-id"), ClientSecret: credentials.Literal("secret", "the-secret")})
	require.NoError(t, err)
	c, err := thirdparty.New(&thirdparty.Config{URL: api.URL, Auth: oauth})
	require.NoError(t, err)

	_, err = c.Push(t.Context(), "k1", []thirdparty.Item{{ID: "1", Version: 1}})
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, token.URL+"/oauth/token", e.TokenEndpoint)
	require.Equal(t, http.StatusBadRequest, e.StatusCode, "the endpoint's status")
	require.True(t, e.AuthRefused())
	require.False(t, e.BatchRefused())
	require.Equal(t, thirdparty.ClassAuth, thirdparty.Classify(err))
	require.Equal(t, "thirdparty: no request sent, the client credentials refused: token endpoint "+token.URL+
		"/oauth/token: answered 400: invalid_client: client authentication failed", e.Error())
	require.NotContains(t, e.Error(), "secret-tenant")
	require.Zero(t, pushed.Load(), "nothing reached the destination")

	// The endpoint failing (5xx) is transient, and still the endpoint's.
	status = http.StatusServiceUnavailable
	_, err = c.Push(t.Context(), "k2", []thirdparty.Item{{ID: "1", Version: 1}})
	require.ErrorAs(t, err, &e)
	require.Equal(t, thirdparty.ClassTransient, thirdparty.Classify(err))
	require.Contains(t, e.Error(), "thirdparty: no request sent: token endpoint "+token.URL+"/oauth/token: answered 503")
}

// Issue 54 point 2: a token endpoint that quotes the request's
// Authorization and form in its refusal (the project's fake, with
// EchoAuthorization) has the client's secret in none of its forms in the
// push error, nor in the token endpoint's error that errors.As finds: the
// Basic header's base64 of the URL-encoded id and secret, as OAuth2
// clients send it, included.
func TestTokenEndpointEchoScrubbed(t *testing.T) {
	t.Parallel()
	fake := httptest.NewServer(fakethirdparty.New(fakethirdparty.Config{EchoAuthorization: true}))
	t.Cleanup(fake.Close)
	const id, secret = "the id/é", "se/cr+et=&?x"
	oauth, err := credentials.NewOAuth2(credentials.OAuth2Config{TokenURL: fake.URL + "/oauth/token",
		ClientID: credentials.Literal("id", id), ClientSecret: credentials.Literal("secret", secret)})
	require.NoError(t, err)
	c, err := thirdparty.New(&thirdparty.Config{URL: fake.URL, Auth: oauth})
	require.NoError(t, err)

	_, err = c.Push(t.Context(), "k1", []thirdparty.Item{{ID: "1", Version: 1}})
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.True(t, e.AuthRefused())
	var te *credentials.TokenError
	require.ErrorAs(t, err, &te)
	sent := base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(id) + ":" + url.QueryEscape(secret)))
	forms := []string{secret, url.QueryEscape(secret), sent, strings.TrimRight(sent, "="),
		base64.StdEncoding.EncodeToString([]byte(id + ":" + secret)),
		base64.URLEncoding.EncodeToString([]byte(url.QueryEscape(id) + ":" + url.QueryEscape(secret)))}
	for _, text := range []string{e.Error(), te.Error(), c.Scrub("stored: Basic " + sent)} {
		for _, f := range forms {
			require.NotContains(t, text, f)
		}
	}
	require.Contains(t, e.Error(), "invalid_client: you sent Authorization: Basic [redacted]")
	require.Equal(t, "stored: Basic [redacted]", c.Scrub("stored: Basic "+sent))
}

// A third party that quotes the request's Authorization in a rejection
// of a 2xx answer, or in a refusal: the Basic header of credentials.Basic
// and of a URL's user and password are scrubbed, not only a bearer token.
func TestBasicHeaderEchoedIsRedacted(t *testing.T) {
	t.Parallel()
	const user, password = "user", "pa/ss+wd=&é"
	echo := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse/v1/batches" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, "you sent "+r.Header.Get("Authorization"))
			return
		}
		b, _ := json.Marshal(map[string]any{"results": []map[string]string{{"id": "1", "status": "rejected", "error": "you sent " + r.Header.Get("Authorization")}}})
		_, _ = w.Write(b)
	}
	srv := httptest.NewServer(http.HandlerFunc(echo))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	withUser := *u
	withUser.User = url.UserPassword(user, password)
	basic := &credentials.Basic{Username: credentials.Literal("username", user), Password: credentials.Literal("password", password)}
	for name, cfg := range map[string]*thirdparty.Config{
		"credentials.Basic":     {URL: srv.URL, Auth: basic},
		"a URL's user":          {URL: withUser.String()},
		"refused, Basic":        {URL: srv.URL + "/refuse", Auth: basic},
		"refused, a URL's user": {URL: withUser.String() + "/refuse"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := thirdparty.New(cfg)
			require.NoError(t, err)
			t.Cleanup(c.Close)
			res, err := c.Push(t.Context(), "k", []thirdparty.Item{{ID: "1", Version: 1}})
			var text string
			if err != nil {
				text = err.Error()
			} else {
				require.Len(t, res.Rejected, 1)
				text = res.Rejected[0].Error
			}
			require.Contains(t, text, "you sent Basic [redacted]")
			require.NotContains(t, text, base64.StdEncoding.EncodeToString([]byte(user+":"+password)))
		})
	}
}
