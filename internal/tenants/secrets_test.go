package tenants_test

import (
	"encoding/base64"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/credentials"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Issue 54 point 2: a token endpoint that quotes the request's Basic
// header and form in its refusal (the fake, with EchoAuthorization): a
// tenant's client credentials, and the application's client of a refresh
// token, are in none of their forms in the error a push of the tenant's
// account gives.
func TestTokenEndpointEchoScrubbedForTenants(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{EchoAuthorization: true})
	b.exec(t, `CREATE TABLE conns (account text PRIMARY KEY, refresh_token text, client_id text, client_secret text)`)
	const appID, appSecret = "app-client", "app/Sec+ret=2&x"
	const ccID, ccSecret = "cc-client", "cc/Sec+ret=3&y"
	const refresh = "rt/Refresh+tok=4&z"
	b.exec(t, `INSERT INTO conns VALUES ('rt', $1, NULL, NULL), ('cc', NULL, $2, $3)`, refresh, ccID, ccSecret)
	r := b.registry(t, tenants.Config{
		Settings:   &tenants.Settings{Query: `SELECT refresh_token, client_id, client_secret FROM conns WHERE account = $1`},
		ThirdParty: thirdparty.Config{URL: b.url + "/t/{tenant}"},
		TokenURL:   b.url + "/t/{tenant}/oauth/token",
		ClientID:   credentials.Literal("client_id", appID), ClientSecret: credentials.Literal("client_secret", appSecret),
	})
	basic := func(id, secret string) []string {
		escaped := url.QueryEscape(id) + ":" + url.QueryEscape(secret)
		return []string{base64.StdEncoding.EncodeToString([]byte(escaped)), base64.RawURLEncoding.EncodeToString([]byte(escaped)),
			base64.StdEncoding.EncodeToString([]byte(id + ":" + secret))}
	}
	for _, tt := range []struct {
		tenant string
		forms  []string
	}{
		{"rt", append([]string{refresh, url.QueryEscape(refresh), appSecret, url.QueryEscape(appSecret)}, basic(appID, appSecret)...)},
		{"cc", append([]string{ccSecret, url.QueryEscape(ccSecret)}, basic(ccID, ccSecret)...)},
	} {
		c, err := r.Client(t.Context(), tt.tenant)
		require.NoError(t, err)
		_, err = c.Push(t.Context(), "k-"+tt.tenant, []thirdparty.Item{{ID: "1", Version: 1}})
		var e *thirdparty.Error
		require.ErrorAs(t, err, &e, tt.tenant)
		require.Contains(t, e.Error(), "you sent Authorization: Basic [redacted]", tt.tenant)
		var te *credentials.TokenError
		require.ErrorAs(t, err, &te)
		for _, f := range tt.forms {
			require.NotContains(t, e.Error(), f, tt.tenant)
			require.NotContains(t, te.Error(), f, tt.tenant)
		}
		c.Close()
	}
}
