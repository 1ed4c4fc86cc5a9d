package tenants_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	syncerformat "github.com/syncer-dev/syncer/internal/formats/syncer"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// clock is a clock the test moves.
type clock struct{ now atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

type bundle struct {
	fake  *fakethirdparty.Server
	url   string
	pool  *pgxpool.Pool
	dsn   string // the schema's, for a pool of a test's own
	clock *clock
	logs  *dbtest.Buffer // every log line, at debug, for the secret grep
}

// setup starts the fake with cfg and a migrated schema holding the
// application's connections table.
func setup(t testing.TB, cfg fakethirdparty.Config) *bundle {
	t.Helper()
	fake := fakethirdparty.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	schema := dbtest.NewMigrated(t)
	_, err := schema.Pool.Exec(t.Context(), `CREATE TABLE connections (
		account text PRIMARY KEY, url text, token text, refresh_token text, portal_id int, revoked_at timestamptz)`)
	require.NoError(t, err)
	c := &clock{}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return &bundle{fake: fake, url: srv.URL, pool: schema.Pool, dsn: schema.DSN, clock: c, logs: &dbtest.Buffer{}}
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

// registry is a registry of destination crm on b's database (on
// cfg.Pool when given: a pool as the daemon opens it).
func (b *bundle) registry(t testing.TB, cfg tenants.Config) *tenants.Registry {
	t.Helper()
	cfg.Destination = "crm"
	if cfg.Pool == nil {
		cfg.Pool = b.pool
	}
	cfg.Now = b.clock.Now
	cfg.ThirdParty.Timeout = 5 * time.Second
	if cfg.Delivery.Format == nil {
		cfg.Delivery.Format = syncerformat.Format{}
	}
	cfg.Delivery.Installation = "inst-test"
	cfg.Delivery.MaxInlineWait = time.Millisecond
	cfg.Logger = slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := tenants.New(cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

var seq atomic.Int64

// deliver sends n items to tenant's deliverer.
func deliver(t *testing.T, r *tenants.Registry, tenant string, n int) (*delivery.Outcome, error) {
	t.Helper()
	d, err := r.For(t.Context(), tenant)
	if err != nil {
		return nil, err
	}
	items := make([]thirdparty.Item, n)
	for i := range items {
		items[i] = thirdparty.Item{ID: fmt.Sprintf("%s-%d", tenant, seq.Add(1)), Version: 1, Payload: json.RawMessage(`{"n":1}`)}
	}
	return d.Deliver(t.Context(), delivery.Batch{Items: items, Source: "contacts", Time: time.Unix(1700000000, 0)})
}

// forUntil asks r for tenant until done holds of the answer: a connected
// tenant's row is read again behind its batches, and what it gives is
// the answer of a later For.
func forUntil(t *testing.T, r *tenants.Registry, tenant string, done func(error) bool) error {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		_, err = r.For(t.Context(), tenant)
		return done(err)
	}, 10*time.Second, 5*time.Millisecond)
	return err
}

const tokenQuery = `SELECT url, token, portal_id FROM connections WHERE account = $1 AND revoked_at IS NULL`

func TestRoutesEachTenantToItsAccount(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	for _, tenant := range []string{"acme", "globex"} {
		b.exec(t, `INSERT INTO connections (account, url, token) VALUES ($1, $2, $3)`, tenant, b.url+"/t/"+tenant, "tok-secret-"+tenant)
	}
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tokenQuery}})

	_, err := deliver(t, r, "acme", 3)
	require.NoError(t, err)
	_, err = deliver(t, r, "globex", 2)
	require.NoError(t, err)
	st := b.fake.TenantStats()
	require.Equal(t, int64(3), st.Tenants["acme"].ItemsAccepted)
	require.Equal(t, int64(2), st.Tenants["globex"].ItemsAccepted)
	require.Zero(t, b.fake.Stats().Requests, "nothing went to the untenanted account")

	d1, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	d2, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	require.Same(t, d1, d2, "a tenant keeps its deliverer")

	// Unconnected: its rows wait; connected within UnconnectedEvery (well
	// under the 30 s a row that appears must go within), no restart.
	_, err = r.For(t.Context(), "initech")
	require.ErrorIs(t, err, tenants.ErrUnconnected)
	// Recorded in the tenant's namespace, for status and the gauges.
	f, err := breakerstore.ReadTenant(t.Context(), b.pool, "crm", "initech")
	require.NoError(t, err)
	require.True(t, f.Connection.Unconnected)
	require.Contains(t, f.Connection.Error, "no connection row")
	b.exec(t, `INSERT INTO connections (account, url, token) VALUES ('initech', $1, 'tok-secret-initech')`, b.url+"/t/initech")
	_, err = r.For(t.Context(), "initech")
	require.ErrorIs(t, err, tenants.ErrUnconnected, "the answer is trusted for UnconnectedEvery")
	b.clock.Advance(tenants.UnconnectedEvery)
	_, err = deliver(t, r, "initech", 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.fake.TenantStats().Tenants["initech"].ItemsAccepted)
	f, err = breakerstore.ReadTenant(t.Context(), b.pool, "crm", "initech")
	require.NoError(t, err)
	require.False(t, f.Connection.Unconnected, "connected: the fact is gone")

	// A revoked connection makes the tenant unconnected again.
	b.exec(t, `UPDATE connections SET revoked_at = now() WHERE account = 'globex'`)
	b.clock.Advance(tenants.RefreshEveryDefault)
	err = forUntil(t, r, "globex", func(err error) bool { return err != nil })
	require.ErrorIs(t, err, tenants.ErrUnconnected)
	require.NotContains(t, err.Error(), "tok-secret")

	b.requireNoSecret(t, "tok-secret-")
}

func TestDestinationURLWithTenantAndNoQuery(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Token: "shared-secret-token"})
	r := b.registry(t, tenants.Config{ThirdParty: thirdparty.Config{URL: b.url + "/t/{tenant}", Token: "shared-secret-token"}})
	_, err := deliver(t, r, "a b/c", 2)
	require.NoError(t, err)
	_, err = deliver(t, r, "d", 1)
	require.NoError(t, err)
	st := b.fake.TenantStats()
	require.Equal(t, int64(2), st.Tenants["a b/c"].ItemsAccepted, "the tenant's value is escaped into the URL")
	require.Equal(t, int64(1), st.Tenants["d"].ItemsAccepted)
}

func TestRefusedTenantHoldsAloneAndANewTokenResumesIt(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	b.exec(t, `INSERT INTO connections (account, url, token) VALUES ('acme', $1, 'tok-secret-wrong'), ('globex', $2, 'tok-secret-globex')`,
		b.url+"/t/acme", b.url+"/t/globex")
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tokenQuery}})

	_, err := deliver(t, r, "acme", 1)
	require.ErrorIs(t, err, delivery.ErrCredentials)
	require.NotContains(t, err.Error(), "tok-secret")
	_, err = deliver(t, r, "globex", 1)
	require.NoError(t, err, "another tenant goes on")

	// After the refusal the row is read at once: still the same, the
	// tenant stays held.
	refused, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	_, err = refused.Deliver(t.Context(), delivery.Batch{Items: []thirdparty.Item{{ID: "x", Version: 1, Payload: json.RawMessage(`{}`)}}})
	require.ErrorIs(t, err, delivery.ErrCredentials)

	// A new token in the table: read within UnconnectedEvery (a refused
	// tenant's row is looked at as often as an unconnected one's), a new
	// deliverer that sends at once, without waiting for the probe interval.
	b.exec(t, `UPDATE connections SET token = 'tok-secret-acme' WHERE account = 'acme'`)
	b.clock.Advance(tenants.UnconnectedEvery)
	resumed, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	require.NotSame(t, refused, resumed)
	_, err = deliver(t, r, "acme", 2)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.fake.TenantStats().Tenants["acme"].ItemsAccepted)

	// The refusal was the tenant's own fact.
	st, err := breakerstore.ReadStateOf(t.Context(), b.pool, breakerstore.TenantNamespace("crm", "globex"))
	require.NoError(t, err)
	require.False(t, st.Credentials.Refused)

	require.Contains(t, b.logs.String(), `"tenant":"acme"`, "the refusal was logged, naming the tenant")
	b.requireNoSecret(t, "tok-secret-")
}

func TestRefreshTokenRotatedIsStoredByOnRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-", RefreshPrefix: "rt-secret-"}})
	b.exec(t, `INSERT INTO connections (account, refresh_token, portal_id) VALUES ('acme', 'rt-secret-acme', 4711)`)
	settings := &tenants.Settings{
		Query:     `SELECT refresh_token, portal_id FROM connections WHERE account = $1`,
		OnRefresh: `UPDATE connections SET refresh_token = $2 WHERE account = $1`,
	}
	format, err := custom.New(&custom.Config{Request: custom.Request{
		Path: "/t/{tenant}/crm/v3/objects/contacts/batch/upsert",
		Body: `{inputs: [.items[] | {id, version, properties: (.payload + {portal: $tenant.portal_id, account: $tenant.id})}]}`,
	}})
	require.NoError(t, err)
	cfg := tenants.Config{
		Settings:   settings,
		ThirdParty: thirdparty.Config{URL: b.url},
		Delivery:   delivery.Config{Format: format},
		TokenURL:   b.url + "/t/{tenant}/oauth/token",
	}
	b.fake.SetConfig(fakethirdparty.Config{Format: fakethirdparty.FormatCustom, Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-", RefreshPrefix: "rt-secret-"}})
	r := b.registry(t, cfg)

	_, err = deliver(t, r, "acme", 2)
	require.NoError(t, err)
	var stored string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT refresh_token FROM connections WHERE account = 'acme'`).Scan(&stored))
	require.Equal(t, "rt-secret-acme.1", stored, "the rotated refresh token is stored by on_refresh")

	// The stored token read back is no change: the same deliverer.
	before, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	b.clock.Advance(tenants.RefreshEveryDefault)
	after, err := r.For(t.Context(), "acme")
	require.NoError(t, err)
	require.Same(t, before, after)

	// Another daemon starts from the stored token, and rotates it again.
	other := b.registry(t, cfg)
	_, err = deliver(t, other, "acme", 1)
	require.NoError(t, err)
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT refresh_token FROM connections WHERE account = 'acme'`).Scan(&stored))
	require.Equal(t, "rt-secret-acme.2", stored)
	require.Equal(t, int64(3), b.fake.TenantStats().Tenants["acme"].ItemsAccepted)

	b.requireNoSecret(t, "tok-secret-", "rt-secret-")
}

func TestPauseOfOneTenantHoldsItAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	r := b.registry(t, tenants.Config{ThirdParty: thirdparty.Config{URL: b.url + "/t/{tenant}"}})
	st, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("crm", "acme")})
	require.NoError(t, err)
	_, err = st.SetHold(t.Context(), breakerstore.Hold{Paused: true, By: "test"})
	require.NoError(t, err)

	_, err = deliver(t, r, "acme", 1)
	require.ErrorIs(t, err, delivery.ErrHeld)
	_, err = deliver(t, r, "globex", 1)
	require.NoError(t, err)
	require.Zero(t, b.fake.TenantStats().Tenants["acme"].Requests)
}

func TestIdleTenantsAreForgotten(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	r := b.registry(t, tenants.Config{ThirdParty: thirdparty.Config{URL: b.url + "/t/{tenant}"}, IdleAfter: time.Minute})
	for i := range 100 {
		_, err := r.For(t.Context(), fmt.Sprint("t", i))
		require.NoError(t, err)
	}
	require.Equal(t, 100, r.Len())
	b.clock.Advance(2 * time.Minute)
	_, err := r.For(t.Context(), "t0")
	require.NoError(t, err)
	require.Equal(t, 1, r.Len(), "idle tenants are swept at a later use")
}

// requireNoSecret greps the captured logs and every value of syncer's
// state for the secrets' prefixes.
func (b *bundle) requireNoSecret(t *testing.T, prefixes ...string) {
	t.Helper()
	var state strings.Builder
	rows, err := b.pool.Query(context.Background(), `SELECT key || ' ' || value::text FROM syncer_state`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		state.WriteString(s + "\n")
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, b.logs.String()+state.String())
	for _, p := range prefixes {
		require.NotContains(t, b.logs.String(), p, "a secret in the logs")
		require.NotContains(t, state.String(), p, "a secret in syncer_state")
	}
}

// An on_refresh that fails (here at run time, on the new token's value)
// keeps the new token in memory: the tenant goes on, and the failure is
// logged without the token, even though PostgreSQL's message would quote
// it.
func TestOnRefreshFailureKeepsTheTokenAndNoSecret(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-", RefreshPrefix: "rt-secret-"}})
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	r := b.registry(t, tenants.Config{
		Settings: &tenants.Settings{
			Query:     `SELECT refresh_token FROM connections WHERE account = $1`,
			OnRefresh: `UPDATE connections SET portal_id = $2::int WHERE account = $1`,
		},
		ThirdParty: thirdparty.Config{URL: b.url + "/t/{tenant}"},
		TokenURL:   b.url + "/t/{tenant}/oauth/token",
	})
	_, err := deliver(t, r, "acme", 1)
	require.NoError(t, err)
	require.Contains(t, b.logs.String(), "on_refresh failed to store it")
	require.Contains(t, b.logs.String(), "SQLSTATE 22P02")
	// The next read of the row gives the token this process rotated away
	// from: no change, the tenant goes on with the new one.
	b.clock.Advance(tenants.RefreshEveryDefault)
	_, err = deliver(t, r, "acme", 1)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.fake.TenantStats().Tenants["acme"].ItemsAccepted)
	b.requireNoSecret(t, "tok-secret-", "rt-secret-")
}

// A person's probe of one refused tenant (syncer probe --destination crm
// --tenant acme writes it in the tenant's namespace) lets its next batch
// go at once rather than at the probe interval.
func TestProbeOfARefusedTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	b.exec(t, `INSERT INTO connections (account, url, token) VALUES ('acme', $1, 'tok-secret-acme')`, b.url+"/t/acme")
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tokenQuery}})
	b.fake.RevokeTenant("acme")
	_, err := deliver(t, r, "acme", 1)
	require.ErrorIs(t, err, delivery.ErrCredentials)
	b.fake.RestoreTenant("acme", "")
	_, err = deliver(t, r, "acme", 1)
	require.ErrorIs(t, err, delivery.ErrCredentials, "held until the probe interval")

	st, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("crm", "acme")})
	require.NoError(t, err)
	facts, err := st.Load(t.Context())
	require.NoError(t, err)
	require.True(t, facts.Credentials.Refused, "the refusal is the tenant's fact")
	require.NoError(t, st.SetProbe(t.Context(), breakerstore.Probe{At: time.Now().UTC(), By: "test"}))
	require.Eventually(t, func() bool {
		_, err := deliver(t, r, "acme", 1)
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "the probe is taken within the deliverer's read of its facts")
	facts, err = st.Load(t.Context())
	require.NoError(t, err)
	require.False(t, facts.Credentials.Refused)
	require.True(t, facts.ProbeAnswer.Accepted)
}
