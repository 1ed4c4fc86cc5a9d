package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Secrets of the auth tests: long enough to be unmistakable in any output.
const (
	verifyToken        = "tok-verify-9f3b2c71e0d4a8b6"
	verifyPassword     = "pw-verify-61c0e9d4b7a2f358"
	verifyClientSecret = "cs-verify-0a7e5d3c9b1f2468"
	verifyOAuthToken   = "tok-oauth-d4c3b2a1e0f98765"
)

// configuredVerify is a configured source exported by a running daemon
// until the third party holds its rows; verify runs syncer verify on it.
type configuredVerify struct {
	b      *bundle
	source string
	args   []string
}

// secretFile writes a secret into the test's directory and returns its
// path: auth reads _file secrets, so no test touches the process's
// environment.
func secretFile(t *testing.T, dir, name, value string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(value+"\n"), 0o600))
	return p
}

// newConfiguredVerify is the source orders (id, status) with n rows, whose
// destination crm is url with the extra YAML dest, held by fake.
func newConfiguredVerify(t *testing.T, ctx context.Context, url, dest string, fake *fakethirdparty.Server, n int, logLevel string) *configuredVerify {
	t.Helper()
	yaml := fmt.Sprintf(`destinations:
  crm:
    url: %s
%s
sources:
  - table: orders
    key: id
    destination: crm
    columns: [id, status]
`, url, dest)
	return startConfigured(t, ctx, yaml, "orders", `CREATE TABLE orders (id integer PRIMARY KEY, status text NOT NULL)`,
		fmt.Sprintf(`INSERT INTO orders SELECT g, 'new' FROM generate_series(1, %d) g`, n),
		func() int { return len(fake.Deliveries()) }, n, logLevel)
}

// startConfigured installs the configuration yaml of source (its table
// made by ddl, filled by fill), runs a daemon until held says the third
// party holds n rows, and waits until verify finds nothing pending.
func startConfigured(t *testing.T, ctx context.Context, yaml, source, ddl, fill string, held func() int, n int, logLevel string) *configuredVerify {
	t.Helper()
	b := setup(t, false)
	_, err := b.pool.Exec(ctx, ddl)
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))
	cv := &configuredVerify{b: b, source: source, args: []string{"--database-url", b.dsn, "--log-level", logLevel, "--config", cfg}}
	r := run(ctx, append([]string{"migrate"}, cv.args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	_, err = b.pool.Exec(ctx, fill)
	require.NoError(t, err)
	startDaemon(t, ctx, cv.args...)
	require.Eventually(t, func() bool { return held() == n }, 30*time.Second, 50*time.Millisecond)
	// Once exported, the rows are no longer pending: verify reads them all.
	require.Eventually(t, func() bool { return cv.verify(ctx).code == 0 }, 10*time.Second, 50*time.Millisecond)
	return cv
}

func (cv *configuredVerify) verify(ctx context.Context, args ...string) result {
	return run(ctx, append(append([]string{"verify", "--source", cv.source, "--lookup-size", "4"}, args...), cv.args...)...)
}

// basicAuth passes requests with user and password on to next, without
// their Authorization, and answers the others 401: the fake takes a bearer
// token only.
func basicAuth(user, password string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/admin") && !strings.HasPrefix(r.URL.Path, "/v1/stats") {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != password {
				http.Error(w, "bad credentials", http.StatusUnauthorized)
				return
			}
		}
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}

// tokenEndpoint answers an OAuth2 client-credentials grant of id and
// secret with token.
func tokenEndpoint(t *testing.T, id, secret, token string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != id || p != secret || r.FormValue("grant_type") != "client_credentials" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "token_type": "bearer", "expires_in": 3600})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestVerifyAuthDestinations: a destination with an auth mapping (bearer,
// basic, OAuth2 client credentials) is read by verify with its own
// credentials, as the daemon sends with them: the same rows read back
// clean, a lost row found missing; with credentials the third party
// refuses, verify stops (exit 1) saying so, without the secret.
func TestVerifyAuthDestinations(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// auth is the destination's auth mapping, given the test's
		// directory; serve wraps the fake.
		auth      func(t *testing.T, dir string) string
		serve     func(fake *fakethirdparty.Server) http.Handler
		fakeToken string
	}{
		{"bearer", func(t *testing.T, dir string) string {
			return "    auth: {type: bearer, token_file: " + secretFile(t, dir, "token", verifyToken) + "}"
		}, func(f *fakethirdparty.Server) http.Handler { return f }, verifyToken},
		{"basic", func(t *testing.T, dir string) string {
			return "    auth: {type: basic, username_file: " + secretFile(t, dir, "user", "syncer") + ", password_file: " + secretFile(t, dir, "password", verifyPassword) + "}"
		}, func(f *fakethirdparty.Server) http.Handler { return basicAuth("syncer", verifyPassword, f) }, ""},
		{"oauth2", func(t *testing.T, dir string) string {
			te := tokenEndpoint(t, "syncer-client", verifyClientSecret, verifyOAuthToken)
			return "    auth:\n      type: oauth2_client_credentials\n      token_url: " + te.URL + "\n" +
				"      client_id_file: " + secretFile(t, dir, "client-id", "syncer-client") + "\n" +
				"      client_secret_file: " + secretFile(t, dir, "client-secret", verifyClientSecret)
		}, func(f *fakethirdparty.Server) http.Handler { return f }, verifyOAuthToken},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true, Token: tt.fakeToken})
			srv := httptest.NewServer(tt.serve(fake))
			t.Cleanup(srv.Close)
			dir := t.TempDir()
			cv := newConfiguredVerify(t, ctx, srv.URL, tt.auth(t, dir), fake, 6, "error")

			fake.ApplyDrift(fakethirdparty.Drift{Lose: []string{"2"}})
			r := cv.verify(ctx, "--json")
			require.Equal(t, 3, r.code, r.stdout+r.stderr)
			v := verifyJSON(t, r)
			require.Equal(t, [3]int64{6, 5, 1}, [3]int64{v.Checked, v.OK, v.Missing})
			require.NotEmpty(t, fake.Lookups())

			// The third party stops taking the credentials: verify stops,
			// resumable, and says the credentials were refused.
			fake.SetConfig(fakethirdparty.Config{Lookup: true, Token: "another-token-entirely"})
			r = cv.verify(ctx)
			require.Equal(t, 1, r.code, r.stdout+r.stderr)
			require.Contains(t, r.stderr, "401")
			for _, secret := range []string{verifyToken, verifyPassword, verifyClientSecret, verifyOAuthToken} {
				require.NotContains(t, r.stdout+r.stderr, secret)
			}
		})
	}
}
