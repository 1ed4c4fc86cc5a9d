package tenants_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// rotating is a fake whose token endpoint rotates refresh tokens, and,
// with family, revokes them all when a rotated-away one is used again.
func rotating(family bool, life time.Duration) fakethirdparty.Config {
	return fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-", RefreshPrefix: "rt-secret-", RefreshFamily: family, TokenLife: life}}
}

// refreshConfig is a destination whose tenants' rows give a refresh token
// at tokenURL, stored again by on_refresh when onRefresh.
func refreshConfig(b *bundle, tokenURL string, onRefresh bool) tenants.Config {
	s := &tenants.Settings{Query: `SELECT refresh_token FROM connections WHERE account = $1`}
	if onRefresh {
		s.OnRefresh = `UPDATE connections SET refresh_token = $2 WHERE account = $1`
	}
	return tenants.Config{Settings: s, ThirdParty: thirdparty.Config{URL: b.url + "/t/{tenant}"}, TokenURL: tokenURL}
}

func (b *bundle) storedRefresh(t *testing.T, tenant string) string {
	t.Helper()
	var stored string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT refresh_token FROM connections WHERE account = $1`, tenant).Scan(&stored))
	return stored
}

// Two processes (two registries: the exporting daemon and verify) spend
// the tenant's rotating refresh token in turn. Each grant reads the token
// stored then, so the first one, renewing after the second rotated the
// token, spends the stored one and not the one it last held: no reuse,
// no family revoked.
func TestRefreshGrantReadsTheStoredTokenBeforeEachGrant(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(true, time.Second))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	cfg := refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true)
	daemon := b.registry(t, cfg)
	reader := b.registry(t, cfg)

	_, err := deliver(t, daemon, "acme", 1)
	require.NoError(t, err)
	require.Equal(t, "rt-secret-acme.1", b.storedRefresh(t, "acme"))
	_, err = deliver(t, reader, "acme", 1)
	require.NoError(t, err)
	require.Equal(t, "rt-secret-acme.2", b.storedRefresh(t, "acme"), "the reader spent the stored token")

	// A new refresh token alone in the row is no new connection: the
	// daemon's deliverer (and what it learnt) stays.
	before, err := daemon.For(t.Context(), "acme")
	require.NoError(t, err)
	b.clock.Advance(tenants.RefreshEveryDefault)
	after, err := daemon.For(t.Context(), "acme")
	require.NoError(t, err)
	require.Same(t, before, after)

	// The daemon's access token expires (1 s): it renews with the token
	// stored now, not rt-secret-acme.1, which it last held.
	time.Sleep(1100 * time.Millisecond)
	_, err = deliver(t, daemon, "acme", 1)
	require.NoError(t, err)
	require.Equal(t, "rt-secret-acme.3", b.storedRefresh(t, "acme"))
	tokens := b.fake.TenantStats().Tokens["acme"]
	require.Equal(t, fakethirdparty.TokenStats{Grants: 3}, tokens, "no token used twice")
	require.Equal(t, int64(3), b.fake.TenantStats().Tenants["acme"].ItemsAccepted)
	b.requireNoSecret(t, "tok-secret-", "rt-secret-")
}

// The application itself (outside syncer's lock) spends the stored token
// and stores the new one while syncer's grant is on its way: the endpoint
// answers syncer invalid_grant, and syncer asks once more with the token
// stored then.
func TestRefreshGrantRetriesOnceWithTheNewlyStoredToken(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(false, time.Hour))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	target, err := url.Parse(b.url)
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	var asked atomic.Int64
	token := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			// The application's own grant, first, and its store.
			resp, err := http.PostForm(b.url+"/t/acme/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"rt-secret-acme"}})
			if err == nil {
				_ = resp.Body.Close()
				_, err = b.pool.Exec(r.Context(), `UPDATE connections SET refresh_token = 'rt-secret-acme.1' WHERE account = 'acme'`)
			}
			if err != nil || resp.StatusCode != http.StatusOK {
				http.Error(w, "the application's grant failed", http.StatusInternalServerError)
				return
			}
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(token.Close)
	r := b.registry(t, refreshConfig(b, token.URL+"/t/{tenant}/oauth/token", true))

	_, err = deliver(t, r, "acme", 1)
	require.NoError(t, err, "the grant tried again with the token stored then")
	require.Equal(t, int64(2), asked.Load(), "syncer asked twice: refused, then with the token stored then")
	require.Equal(t, fakethirdparty.TokenStats{Grants: 2, Refused: 1, Reuses: 1}, b.fake.TenantStats().Tokens["acme"])
	require.Equal(t, "rt-secret-acme.2", b.storedRefresh(t, "acme"))
	b.requireNoSecret(t, "tok-secret-", "rt-secret-")
}

// Issue 54 point 13: a refused refresh token is named as what it is, in
// the error, the log and the tenant's state, not as the client
// credentials.
func TestRefusedRefreshTokenIsNamedSo(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(false, time.Hour))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme-spent')`)
	r := b.registry(t, refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true))

	_, err := deliver(t, r, "acme", 1)
	require.ErrorIs(t, err, delivery.ErrCredentials)
	require.Contains(t, err.Error(), "no request sent, the refresh token refused: token endpoint "+b.url+"/t/acme/oauth/token: answered 400: invalid_grant")
	require.NotContains(t, err.Error(), "client credentials")
	facts, err := breakerstore.ReadTenant(t.Context(), b.pool, "crm", "acme")
	require.NoError(t, err)
	require.True(t, facts.Credentials.Refused)
	require.Contains(t, facts.Credentials.Message, "the refresh token refused")
	require.Contains(t, b.logs.String(), "the token endpoint refused the refresh token")
	require.NotContains(t, b.logs.String(), "client credentials")
	b.requireNoSecret(t, "tok-secret-", "rt-secret-")
}

// A reader in a process of its own (syncer verify --tenant) spends no
// refresh token without on_refresh: the daemon may hold the one it was
// rotated to. With on_refresh it reads as the daemon would.
func TestReaderSpendsNoRefreshTokenWithoutOnRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(true, time.Hour))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	cfg := refreshConfig(b, b.url+"/t/{tenant}/oauth/token", false)
	cfg.Reader = true
	_, _, err := b.registry(t, cfg).Account(t.Context(), "acme")
	require.ErrorIs(t, err, tenants.ErrRefreshNotShared)
	require.Empty(t, b.fake.TenantStats().Tokens, "no grant asked")

	cfg = refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true)
	cfg.Reader = true
	client, _, err := b.registry(t, cfg).Account(t.Context(), "acme")
	require.NoError(t, err)
	_, err = client.Push(t.Context(), "k1", []thirdparty.Item{{ID: "1", Version: 1}})
	require.NoError(t, err)
	require.Equal(t, "rt-secret-acme.1", b.storedRefresh(t, "acme"))
}

// Without on_refresh the daemon keeps a rotated token in memory, and its
// own readers (the background verify) share its grant rather than spend
// the row's token again; the missing on_refresh is logged once, at error.
func TestDaemonReaderSharesTheDeliverersGrant(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(true, time.Hour))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	r := b.registry(t, refreshConfig(b, b.url+"/t/{tenant}/oauth/token", false))
	_, err := deliver(t, r, "acme", 1)
	require.NoError(t, err)
	client, _, err := r.Account(t.Context(), "acme")
	require.NoError(t, err)
	_, err = client.Push(t.Context(), "k-read", []thirdparty.Item{{ID: "1", Version: 1}})
	require.NoError(t, err)
	b.clock.Advance(tenants.RefreshEveryDefault)
	_, err = deliver(t, r, "acme", 1)
	require.NoError(t, err)
	require.Equal(t, fakethirdparty.TokenStats{Grants: 1}, b.fake.TenantStats().Tokens["acme"], "one grant for the deliverer and its reader")
	require.Equal(t, 1, strings.Count(b.logs.String(), "has no tenants.on_refresh"))
	require.Equal(t, "rt-secret-acme", b.storedRefresh(t, "acme"), "nothing stores it")
}

// A token endpoint that quotes the refresh token it refused has it
// scrubbed, at the tenant's first grant too.
func TestRefusedRefreshTokenEchoedIsScrubbed(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(false, time.Hour))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme-echoed')`)
	token := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"no such token: ` + r.PostForm.Get("refresh_token") + `"}`))
	}))
	t.Cleanup(token.Close)
	r := b.registry(t, refreshConfig(b, token.URL, true))
	_, err := deliver(t, r, "acme", 1)
	require.ErrorIs(t, err, delivery.ErrCredentials)
	require.Contains(t, err.Error(), "no such token: [redacted]")
	b.requireNoSecret(t, "rt-secret-")
}

// Issue 54 (the five-workspace walk-through): a token endpoint that
// answers a grant 200 with a rotated refresh token and no access token
// has spent the old token all the same. The OAuth2 client refuses the
// answer; syncer stores the new refresh token first (on_refresh), so its
// next grant spends that one, not the old one again, and an endpoint that
// revokes the family on reuse keeps the tenant. The tenant's last error
// says the endpoint gave no access token, with no token in it.
func TestRefreshTokenOfAnAnswerWithoutAccessTokenIsStored(t *testing.T) {
	t.Parallel()
	cfg := rotating(true, time.Hour)
	cfg.Tenants.NoAccessToken = true
	b := setup(t, cfg)
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	rcfg := refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true)
	rcfg.Delivery.MaxElapsed = 300 * time.Millisecond
	r := b.registry(t, rcfg)

	d, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	_, err = d.Deliver(ctx, delivery.Batch{Items: []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{"n":1}`)}}, Source: "contacts", Time: time.Unix(1700000000, 0)})
	cancel()
	require.Error(t, err)
	require.NotErrorIs(t, err, delivery.ErrCredentials, "the tenant is not refused: %v", err)
	tokens := b.fake.TenantStats().Tokens["acme"]
	require.Zero(t, tokens.Reuses, "no refresh token spent twice")
	require.False(t, tokens.FamilyRevoked)
	require.Positive(t, tokens.Grants)
	require.Equal(t, fmt.Sprintf("rt-secret-acme.%d", tokens.Grants), b.storedRefresh(t, "acme"), "each rotated token stored")
	facts, err := breakerstore.ReadTenant(t.Context(), b.pool, "crm", "acme")
	require.NoError(t, err)
	require.False(t, facts.Credentials.Refused)
	require.Contains(t, facts.LastError.Text, "without a usable access token")
	require.NotContains(t, facts.LastError.Text, "rt-secret-")

	// The endpoint answers well again: the tenant's next grant spends the
	// token stored last.
	cfg.Tenants.NoAccessToken = false
	b.fake.SetConfig(cfg)
	_, err = deliver(t, r, "acme", 1)
	require.NoError(t, err)
	tokens = b.fake.TenantStats().Tokens["acme"]
	require.Zero(t, tokens.Reuses)
	require.Zero(t, tokens.Refused)
	require.Equal(t, fmt.Sprintf("rt-secret-acme.%d", tokens.Grants), b.storedRefresh(t, "acme"))
	b.requireNoSecret(t, "tok-secret-", "rt-secret-")
}

// Issue 54 (the five-workspace walk-through): a tenant whose refresh
// token was refused is connected again; its next grant succeeds and the
// third party turns the request down for another reason (a 400 on the
// body). The grant ended the refusal: the tenant's state no longer gives
// the token endpoint's old "refresh token" refusal as its reason, and its
// rows are no longer held for the refusal's probe interval.
func TestGrantedTokenEndsTheTokenEndpointsRefusal(t *testing.T) {
	t.Parallel()
	cfg := rotating(false, time.Hour)
	b := setup(t, cfg)
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme-spent')`)
	r := b.registry(t, refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true))
	_, err := deliver(t, r, "acme", 1)
	require.ErrorIs(t, err, delivery.ErrCredentials)
	state, text := b.stateOf(t, "acme")
	require.Equal(t, breakerstore.TenantRefused, state)
	require.Contains(t, text, "the refresh token refused")

	// Connected again; the third party refuses the next batch's body.
	b.exec(t, `UPDATE connections SET refresh_token = 'rt-secret-acme' WHERE account = 'acme'`)
	cfg.PoisonField = "poison"
	b.fake.SetConfig(cfg)
	b.clock.Advance(delivery.AuthProbeIntervalDefault + time.Second)
	d, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	_, err = d.Deliver(t.Context(), delivery.Batch{Items: []thirdparty.Item{{ID: "p1", Version: 1, Payload: json.RawMessage(`{"poison":1}`)}}, Source: "contacts", Time: time.Unix(1700000000, 0)})
	require.NotErrorIs(t, err, delivery.ErrCredentials)
	require.Equal(t, int64(1), b.fake.TenantStats().Tokens["acme"].Grants)
	facts, err := breakerstore.ReadTenant(t.Context(), b.pool, "crm", "acme")
	require.NoError(t, err)
	require.False(t, facts.Credentials.Refused, "the grant ended the endpoint's refusal: %s", facts.Credentials.Message)
	state, text = b.stateOf(t, "acme")
	require.NotEqual(t, breakerstore.TenantRefused, state, text)
	require.NotContains(t, text, "refresh token")
	require.Contains(t, b.logs.String(), "the token endpoint grants the credentials again")

	// The next batch is not held for the probe interval.
	cfg.PoisonField = ""
	b.fake.SetConfig(cfg)
	_, err = deliver(t, r, "acme", 1)
	require.NoError(t, err)
	b.requireNoSecret(t, "tok-secret-", "rt-secret-")
}

// The same with the deliverer that was refused (its row unchanged: the
// connection was revoked at the token endpoint, then restored): its own
// standing refusal ends with the grant.
func TestGrantedTokenEndsTheSameDeliverersRefusal(t *testing.T) {
	t.Parallel()
	cfg := rotating(false, time.Hour)
	b := setup(t, cfg)
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	rcfg := refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true)
	rcfg.Delivery.AuthProbeInterval = 200 * time.Millisecond
	r := b.registry(t, rcfg)
	b.fake.RevokeTenant("acme")
	_, err := deliver(t, r, "acme", 1)
	require.ErrorIs(t, err, delivery.ErrCredentials)
	before, err := r.For(t.Context(), "acme")
	require.NoError(t, err)

	b.fake.RestoreTenant("acme", "")
	cfg.PoisonField = "poison"
	b.fake.SetConfig(cfg)
	time.Sleep(250 * time.Millisecond) // the deliverer's probe time
	d, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	require.Same(t, before, d)
	_, err = d.Deliver(t.Context(), delivery.Batch{Items: []thirdparty.Item{{ID: "p1", Version: 1, Payload: json.RawMessage(`{"poison":1}`)}}, Source: "contacts", Time: time.Unix(1700000000, 0)})
	require.NotErrorIs(t, err, delivery.ErrCredentials)
	require.Equal(t, int64(1), b.fake.TenantStats().Tokens["acme"].Grants)
	state, text := b.stateOf(t, "acme")
	require.NotEqual(t, breakerstore.TenantRefused, state, text)
	require.NotContains(t, text, "refresh token")
	require.Equal(t, 1, strings.Count(b.logs.String(), "the token endpoint grants the credentials again"))
}
