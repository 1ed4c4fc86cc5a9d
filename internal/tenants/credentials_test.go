package tenants_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Each kind of credentials a row may give, and its headers, reach the
// tenant's requests: basic auth, a client-credentials grant at the token
// endpoint (with the row's client), and the destination's own token for a
// row that gives none.
func TestRowCredentialsAndHeaders(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]http.Header{} // by path
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/oauth/token" {
			id, secret, _ := r.BasicAuth()
			require.NoError(t, r.ParseForm())
			if id != "client-globex" || secret != "cs-secret-globex" || r.PostForm.Get("grant_type") != "client_credentials" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"at-secret-globex","token_type":"Bearer","expires_in":3600}`))
			return
		}
		mu.Lock()
		seen[r.URL.Path] = r.Header.Clone()
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE creds (account text, username text, password text, client_id text, client_secret text, headers jsonb)`)
	b.exec(t, `INSERT INTO creds VALUES
		('acme', 'acme-user', 'pw-secret-acme', NULL, NULL, '{"X-Portal": "acme-portal"}'),
		('globex', NULL, NULL, 'client-globex', 'cs-secret-globex', NULL),
		('initech', NULL, NULL, NULL, NULL, NULL)`)
	format, err := custom.New(&custom.Config{Request: custom.Request{Path: "/{tenant}/batch"}})
	require.NoError(t, err)
	r := b.registry(t, tenants.Config{
		Settings:   &tenants.Settings{Query: `SELECT username, password, client_id, client_secret, headers FROM creds WHERE account = $1`},
		ThirdParty: thirdparty.Config{URL: srv.URL, Token: "dest-secret-token", Headers: http.Header{"X-App": {"syncer"}}},
		Delivery:   delivery.Config{Format: format},
		TokenURL:   srv.URL + "/oauth/token",
	})
	for _, tenant := range []string{"acme", "globex", "initech"} {
		_, err := deliver(t, r, tenant, 1)
		require.NoError(t, err, tenant)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("acme-user:pw-secret-acme")), seen["/acme/batch"].Get("Authorization"))
	require.Equal(t, "acme-portal", seen["/acme/batch"].Get("X-Portal"))
	require.Equal(t, "syncer", seen["/acme/batch"].Get("X-App"), "the destination's headers stay")
	require.Equal(t, "Bearer at-secret-globex", seen["/globex/batch"].Get("Authorization"))
	require.Empty(t, seen["/globex/batch"].Get("X-Portal"))
	require.Equal(t, "Bearer dest-secret-token", seen["/initech/batch"].Get("Authorization"), "a row without credentials: the destination's")

	// A row of two kinds of credentials is the tenant's error, naming no value.
	b.exec(t, `UPDATE creds SET client_id = 'x', client_secret = 'y' WHERE account = 'acme'`)
	b.clock.Advance(tenants.RefreshEveryDefault)
	err = forUntil(t, r, "acme", func(err error) bool { return err != nil })
	require.ErrorContains(t, err, "more than one kind")
	require.False(t, strings.Contains(err.Error(), "pw-secret"))
	b.requireNoSecret(t, "pw-secret", "cs-secret", "at-secret", "dest-secret")
}
