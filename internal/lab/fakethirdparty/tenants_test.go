package fakethirdparty_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// tenantClient is a client of tenant's account on b's fake, with token.
func (b *bundle) tenantClient(t *testing.T, tenant, token string) *thirdparty.Client {
	t.Helper()
	c, err := thirdparty.New(&thirdparty.Config{URL: b.http.URL + fakethirdparty.TenantPrefix + tenant, Token: token, Now: b.clock.Now})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func statusOf(t *testing.T, err error) int {
	t.Helper()
	var he *thirdparty.Error
	require.ErrorAs(t, err, &he)
	return he.StatusCode
}

func TestTenantAccountsKeepTheirOwnStats(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, nil)
	acme, globex := b.tenantClient(t, "acme", ""), b.tenantClient(t, "globex", "")

	its := batch(1, 3, 1, "")
	_, err := acme.Push(t.Context(), key(its), its)
	require.NoError(t, err)
	// The same pairs under the same key at another tenant are that
	// tenant's own first delivery, not a duplicate or a conflict.
	_, err = globex.Push(t.Context(), key(its), its)
	require.NoError(t, err)
	its2 := batch(1, 1, 2, "")
	_, err = globex.Push(t.Context(), key(its2), its2)
	require.NoError(t, err)

	require.Zero(t, b.fake.Stats().Requests, "the untenanted account received nothing")
	ts := b.fake.TenantStats()
	require.Equal(t, int64(3), ts.Tenants["acme"].ItemsAccepted)
	require.Equal(t, int64(4), ts.Tenants["globex"].ItemsAccepted)
	require.Equal(t, int64(3), ts.Total.Requests)
	require.Equal(t, int64(7), ts.Total.DistinctPairs)
	require.Zero(t, ts.Total.DuplicatePairs+ts.Total.KeyConflicts+ts.Total.OutOfOrder)

	// The same figures over HTTP: per tenant under its prefix, and all.
	code, _, body := b.post(t, http.MethodGet, "/t/acme/v1/stats", nil, "")
	require.Equal(t, http.StatusOK, code)
	var one fakethirdparty.Stats
	require.NoError(t, json.Unmarshal([]byte(body), &one))
	require.Equal(t, int64(3), one.ItemsAccepted)
	code, _, body = b.post(t, http.MethodGet, "/v1/tenants/stats", nil, "")
	require.Equal(t, http.StatusOK, code)
	var all fakethirdparty.TenantStats
	require.NoError(t, json.Unmarshal([]byte(body), &all))
	require.Equal(t, int64(7), all.Total.ItemsAccepted)
	require.Len(t, all.Tenants, 2)

	// A key reused for other pairs is a conflict of that tenant only.
	_, err = acme.Push(t.Context(), key(its), batch(9, 1, 1, ""))
	require.Error(t, err)
	ts = b.fake.TenantStats()
	require.Equal(t, int64(1), ts.Tenants["acme"].KeyConflicts)
	require.Zero(t, ts.Tenants["globex"].KeyConflicts)

	b.fake.Reset()
	require.Empty(t, b.fake.TenantStats().Tenants)
}

func TestTenantRateLimitIsEachTenantsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{RateLimit: 2}}, nil)
	acme, globex := b.tenantClient(t, "acme", ""), b.tenantClient(t, "globex", "")

	for i := range 2 {
		its := batch(i, 1, 1, "")
		_, err := acme.Push(t.Context(), key(its), its)
		require.NoError(t, err)
	}
	its := batch(10, 1, 1, "")
	_, err := acme.Push(t.Context(), key(its), its)
	require.Equal(t, http.StatusTooManyRequests, statusOf(t, err))
	// Unannounced: no Retry-After.
	code, h, _ := b.post(t, http.MethodPost, "/t/acme/v1/batches", map[string]string{"Content-Type": "application/json"}, `{"items":[]}`)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Empty(t, h.Get("Retry-After"))

	// acme's 429s do not limit globex, nor the untenanted account.
	for i := range 2 {
		its := batch(i, 1, 1, "")
		_, err := globex.Push(t.Context(), key(its), its)
		require.NoError(t, err)
	}
	_, err = b.push(t, its)
	require.NoError(t, err)

	// A second later acme's limit has room again.
	b.clock.Advance(1e9)
	_, err = acme.Push(t.Context(), key(its), its)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.fake.TenantStats().Tenants["acme"].RequestsByStatus["429"])
}

func TestTenantAnnouncedLimitSendsRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{RateLimit: 1, Announced: true}}, nil)
	acme := b.tenantClient(t, "acme", "")
	its := batch(1, 1, 1, "")
	_, err := acme.Push(t.Context(), key(its), its)
	require.NoError(t, err)
	_, err = acme.Push(t.Context(), key(its), its)
	var e *thirdparty.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusTooManyRequests, e.StatusCode)
	require.NotEmpty(t, e.RetryAfterRaw)
}

func TestTenantTokenRevokeAndRestore(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-"}}, nil)
	its := batch(1, 1, 1, "")

	_, err := b.tenantClient(t, "acme", "tok-globex").Push(t.Context(), key(its), its)
	require.Equal(t, http.StatusUnauthorized, statusOf(t, err), "another tenant's token")
	acme := b.tenantClient(t, "acme", "tok-acme")
	_, err = acme.Push(t.Context(), key(its), its)
	require.NoError(t, err)

	code, _, _ := b.post(t, http.MethodPost, "/v1/admin/tenants/acme/revoke", nil, "")
	require.Equal(t, http.StatusNoContent, code)
	its2 := batch(1, 1, 2, "")
	_, err = acme.Push(t.Context(), key(its2), its2)
	require.Equal(t, http.StatusUnauthorized, statusOf(t, err))
	// globex is not revoked with acme.
	_, err = b.tenantClient(t, "globex", "tok-globex").Push(t.Context(), key(its), its)
	require.NoError(t, err)

	code, _, _ = b.post(t, http.MethodPost, "/v1/admin/tenants/acme/restore", nil, "")
	require.Equal(t, http.StatusNoContent, code)
	_, err = acme.Push(t.Context(), key(its2), its2)
	require.NoError(t, err)

	// A restore with a new token: the old one is refused from then on.
	code, _, _ = b.post(t, http.MethodPost, "/v1/admin/tenants/acme/restore?token=rotated", nil, "")
	require.Equal(t, http.StatusNoContent, code)
	its3 := batch(1, 1, 3, "")
	_, err = acme.Push(t.Context(), key(its3), its3)
	require.Equal(t, http.StatusUnauthorized, statusOf(t, err))
	_, err = b.tenantClient(t, "acme", "rotated").Push(t.Context(), key(its3), its3)
	require.NoError(t, err)

	st := b.fake.TenantStats().Tenants["acme"]
	require.Equal(t, int64(3), st.RequestsByStatus["401"])
	require.Equal(t, int64(3), st.DistinctPairs)
	require.Zero(t, st.OutOfOrder)
}

func TestTenantTokenEndpointRotatesRefreshToken(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-", RefreshPrefix: "rt-"}}, nil)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	grant := func(refresh string) (int, map[string]any) {
		code, _, body := b.post(t, http.MethodPost, "/t/acme/oauth/token", form, "grant_type=refresh_token&refresh_token="+refresh)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		return code, out
	}
	code, out := grant("rt-acme")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "tok-acme", out["access_token"])
	require.Equal(t, "rt-acme.1", out["refresh_token"])
	code, out = grant("rt-acme")
	require.Equal(t, http.StatusBadRequest, code, "a rotated refresh token is spent")
	require.Equal(t, "invalid_grant", out["error"])
	code, out = grant("rt-acme.1")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "rt-acme.2", out["refresh_token"])

	b.fake.RevokeTenant("acme")
	code, _ = grant("rt-acme.2")
	require.Equal(t, http.StatusBadRequest, code)
	// Another tenant's refresh token is its own.
	code, _, _ = b.post(t, http.MethodPost, "/t/globex/oauth/token", form, "grant_type=refresh_token&refresh_token=rt-acme.2")
	require.Equal(t, http.StatusBadRequest, code)
}

// Found by the five-workspace walk-through of docs/destinations.md: a
// fake started with --tenant-refresh-prefix alone (every tenant taking any
// bearer token) granted an empty access_token, which an OAuth2 client
// refuses ("server response missing access_token") after the fake had
// rotated the refresh token: the client's next grant reused the old one
// and, with --tenant-refresh-family, every tenant was revoked. A tenant
// that requires no token is given one all the same.
func TestTenantTokenEndpointGivesATokenWhenNoneIsRequired(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{RefreshPrefix: "rt-"}}, nil)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	code, _, body := b.post(t, http.MethodPost, "/t/acme/oauth/token", form, "grant_type=refresh_token&refresh_token=rt-acme")
	require.Equal(t, http.StatusOK, code)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	require.NotEmpty(t, out["access_token"])
	require.Equal(t, "rt-acme.1", out["refresh_token"])
}

// NoAccessToken: a grant answered 200 with the rotated refresh token and
// no access_token; the refresh token is rotated all the same.
func TestTenantTokenEndpointMayAnswerWithoutAnAccessToken(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-", RefreshPrefix: "rt-", NoAccessToken: true}}, nil)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	code, _, body := b.post(t, http.MethodPost, "/t/acme/oauth/token", form, "grant_type=refresh_token&refresh_token=rt-acme")
	require.Equal(t, http.StatusOK, code)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	require.NotContains(t, out, "access_token")
	require.Equal(t, "rt-acme.1", out["refresh_token"])
	code, _, _ = b.post(t, http.MethodPost, "/t/acme/oauth/token", form, "grant_type=refresh_token&refresh_token=rt-acme")
	require.Equal(t, http.StatusBadRequest, code, "the token was rotated")
}

// RefreshFamily: a spent refresh token used again revokes the tenant's
// whole family, the newest token included, until a restore starts a new
// one; an unknown token is refused alone.
func TestTenantTokenEndpointRevokesTheFamilyOnReuse(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-", RefreshPrefix: "rt-", RefreshFamily: true, TokenLife: 2 * time.Second}}, nil)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	grant := func(refresh string) (int, map[string]any) {
		code, _, body := b.post(t, http.MethodPost, "/t/acme/oauth/token", form, "grant_type=refresh_token&refresh_token="+refresh)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		return code, out
	}
	code, out := grant("rt-acme")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "rt-acme.1", out["refresh_token"])
	require.EqualValues(t, 2, out["expires_in"])
	code, out = grant("rt-nobody")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "unknown refresh token", out["error_description"])
	code, out = grant("rt-acme.1")
	require.Equal(t, http.StatusOK, code, "an unknown token revokes nothing")
	require.Equal(t, "rt-acme.2", out["refresh_token"])

	code, out = grant("rt-acme.1")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "invalid_grant", out["error"])
	require.Equal(t, "refresh token reused", out["error_description"])
	code, out = grant("rt-acme.2")
	require.Equal(t, http.StatusBadRequest, code, "the newest token went with its family")
	require.Equal(t, "family revoked", out["error_description"])
	st := b.fake.TenantStats().Tokens["acme"]
	require.Equal(t, fakethirdparty.TokenStats{Grants: 2, Refused: 3, Reuses: 1, FamilyRevoked: true}, st)

	b.fake.RestoreTenant("acme", "")
	code, out = grant("rt-acme")
	require.Equal(t, http.StatusOK, code, "a restore starts a new family")
	require.Equal(t, "rt-acme.1", out["refresh_token"])
}

// NewRefreshFamily is a person connecting the account again: a family
// whose tokens no earlier family had, the old ones refused alone (not
// reuses), a revoked family over; a grant while the connection is revoked
// is counted apart.
func TestTenantNewRefreshFamily(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-", RefreshPrefix: "rt-", RefreshFamily: true}}, nil)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	grant := func(refresh string) (int, map[string]any) {
		code, _, body := b.post(t, http.MethodPost, "/t/acme/oauth/token", form, "grant_type=refresh_token&refresh_token="+refresh)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		return code, out
	}
	code, _ := grant("rt-acme")
	require.Equal(t, http.StatusOK, code)
	b.fake.RevokeTenant("acme")
	code, out := grant("rt-acme.1")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "the connection is revoked", out["error_description"])

	first := b.fake.NewRefreshFamily("acme")
	require.Equal(t, "rt-acme~1", first)
	b.fake.RestoreTenant("acme", "")
	code, out = grant("rt-acme.1")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "unknown refresh token", out["error_description"], "the old family's token is refused alone")
	code, out = grant(first)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "rt-acme~1.1", out["refresh_token"])
	code, _ = grant("rt-acme")
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, fakethirdparty.TokenStats{Grants: 2, Refused: 3, RefusedRevoked: 1}, b.fake.TenantStats().Tokens["acme"])
}
