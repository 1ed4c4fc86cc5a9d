package tenants_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// lookup sends one lookup of id with c, as `syncer verify` reads, and
// returns the answer's body.
func lookup(t *testing.T, c *thirdparty.Client, id string) (string, error) {
	t.Helper()
	var body string
	_, err := c.Send(context.Background(), "k-"+id, &thirdparty.Request{Method: http.MethodPost, Path: "/v1/lookup",
		ContentType: "application/json", Body: []byte(`{"ids":["` + id + `"]}`), IDs: []string{id}},
		func(a *thirdparty.Answer) (*thirdparty.Result, error) {
			if e := a.Refusal(); e != nil {
				return nil, e
			}
			body = string(a.Body)
			return &thirdparty.Result{}, nil
		})
	return body, err
}

// Issue 44 with 43: Client reads a tenant's account with its connection
// row's URL and token (another tenant's is refused by the account), or,
// without a tenants block, with the destination's URL bound to the
// tenant; a tenant without a row is ErrUnconnected; no error holds a
// token.
func TestRegistryClient(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Lookup: true, Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	b.exec(t, `INSERT INTO connections (account, url, token) VALUES ('acme', $1 || '/t/acme', 'tok-secret-acme'),
		('globex', $1 || '/t/globex', 'tok-secret-acme')`, b.url)
	reg, err := tenants.New(tenants.Config{Destination: "crm", Pool: b.pool,
		Settings:   &tenants.Settings{Query: `SELECT url, token FROM connections WHERE account = $1`},
		ThirdParty: thirdparty.Config{URL: "http://127.0.0.1:1/unused/{tenant}"}})
	require.NoError(t, err)
	t.Cleanup(reg.Close)

	c, err := reg.Client(t.Context(), "acme")
	require.NoError(t, err)
	body, err := lookup(t, c, "1")
	require.NoError(t, err)
	require.JSONEq(t, `{"items":[]}`, body)

	// globex's row holds acme's token: globex's account refuses it.
	c, err = reg.Client(t.Context(), "globex")
	require.NoError(t, err)
	_, err = lookup(t, c, "1")
	var te *thirdparty.Error
	require.True(t, errors.As(err, &te) && te.AuthRefused(), "%v", err)
	require.NotContains(t, err.Error(), "tok-secret")

	_, err = reg.Client(t.Context(), "initech")
	require.ErrorIs(t, err, tenants.ErrUnconnected)
	_, err = reg.Client(t.Context(), "")
	require.Error(t, err)

	// Without a tenants block: the destination's URL, {tenant} bound.
	plain, err := tenants.New(tenants.Config{Destination: "crm", Pool: b.pool,
		ThirdParty: thirdparty.Config{URL: b.url + "/t/{tenant}", Token: "tok-secret-globex"}})
	require.NoError(t, err)
	t.Cleanup(plain.Close)
	c, err = plain.Client(t.Context(), "globex")
	require.NoError(t, err)
	body, err = lookup(t, c, "2")
	require.NoError(t, err)
	require.True(t, strings.Contains(body, "items"), body)
}
