package cli_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// TestVerifySecretsNeverShown: verify on a destination with a bearer token
// and on one with a basic password, as text and --json, with examples of
// a drifted row and debug logs, and against a third party that echoes the
// Authorization header back in its refusal: no secret, nor the header that
// carries it, nor a prefix of it, appears in stdout, stderr or the logs. The examples show
// both sides of the drifted row.
func TestVerifySecretsNeverShown(t *testing.T) {
	t.Parallel()
	basicHeader := "Basic " + base64.StdEncoding.EncodeToString([]byte("syncer:"+verifyPassword))
	for _, tt := range []struct {
		name      string
		auth      func(t *testing.T, dir string) string
		fakeToken string
		serve     func(fake *fakethirdparty.Server) http.Handler
		secrets   []string
		// echo is the status of the answer that quotes the credentials,
		// want what verify says of it.
		echo int
		want string
	}{
		{"bearer", func(t *testing.T, dir string) string {
			return "    auth: {type: bearer, token_file: " + secretFile(t, dir, "token", verifyToken) + "}"
		}, verifyToken, func(f *fakethirdparty.Server) http.Handler { return f }, []string{verifyToken}, http.StatusUnauthorized, "401"},
		// A verify block's response program fails on a 200 that quotes
		// them: gojq's preview of the value is not shown.
		{"block", func(t *testing.T, dir string) string {
			return "    auth: {type: bearer, token_file: " + secretFile(t, dir, "token", verifyToken) + "}\n" +
				"    verify: {request: {path: /v1/lookup}, response: '[.body.items[] | {id, payload}]'}"
		}, verifyToken, func(f *fakethirdparty.Server) http.Handler { return f }, []string{verifyToken, verifyToken[:12]},
			http.StatusOK, "verify.response: cannot iterate over: string"},
		{"basic", func(t *testing.T, dir string) string {
			return "    auth: {type: basic, username_file: " + secretFile(t, dir, "user", "syncer") + ", password_file: " + secretFile(t, dir, "password", verifyPassword) + "}"
		}, "", func(f *fakethirdparty.Server) http.Handler { return basicAuth("syncer", verifyPassword, f) },
			[]string{verifyPassword, basicHeader, strings.TrimPrefix(basicHeader, "Basic ")}, http.StatusUnauthorized, "401"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			fake := fakethirdparty.New(fakethirdparty.Config{Lookup: true, Token: tt.fakeToken})
			var echo atomic.Bool
			inner := tt.serve(fake)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if echo.Load() && r.URL.Path == "/v1/lookup" {
					// A careless third party quotes the request's credentials.
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tt.echo)
					_ = json.NewEncoder(w).Encode(map[string]any{"items": r.Header.Get("Authorization")})
					return
				}
				inner.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			cv := newConfiguredVerify(t, ctx, srv.URL, tt.auth(t, t.TempDir()), fake, 6, "debug")
			fake.ApplyDrift(fakethirdparty.Drift{
				Lose: []string{"2"},
				Edit: map[string]json.RawMessage{"3": json.RawMessage(`{"id": 3, "status": "edited there"}`)},
			})

			var outputs []result
			text := cv.verify(ctx)
			require.Equal(t, 3, text.code, text.stdout+text.stderr)
			require.Contains(t, text.stdout, `stale 3: here {"id": 3, "status": "new"}, there {"id":3,"status":"edited there"}`)
			require.Contains(t, text.stdout, `missing 2: here {"id": 2, "status": "new"}, there null`)
			outputs = append(outputs, text)

			js := cv.verify(ctx, "--json")
			require.Equal(t, 3, js.code, js.stdout+js.stderr)
			kind, here, there := exampleOf(t, verifyJSON(t, js), "3")
			require.Equal(t, "stale", kind)
			require.JSONEq(t, `{"id": 3, "status": "new"}`, string(here))
			require.JSONEq(t, `{"id": 3, "status": "edited there"}`, string(there))
			outputs = append(outputs, js)

			echo.Store(true)
			for _, args := range [][]string{nil, {"--json"}} {
				r := cv.verify(ctx, args...)
				require.Equal(t, 1, r.code, r.stdout+r.stderr)
				require.Contains(t, r.stderr, tt.want)
				outputs = append(outputs, r)
			}
			for i, r := range outputs {
				if i < 2 {
					require.Contains(t, r.stderr, `"level":"DEBUG"`, "the logs are in the output checked")
				}
				for _, secret := range tt.secrets {
					require.NotContains(t, r.stdout, secret)
					require.NotContains(t, r.stderr, secret)
				}
			}
		})
	}
}
