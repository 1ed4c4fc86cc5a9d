package tenants_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// stateOf is tenant's state and its text as status reads them.
func (b *bundle) stateOf(t *testing.T, tenant tenant.Tenant) (string, string) {
	t.Helper()
	f, err := breakerstore.ReadTenant(t.Context(), b.pool, "crm", tenant)
	require.NoError(t, err)
	return f.StateAt(time.Now())
}

// Issue 54 point 6: a query that fails for one tenant (a division by
// zero; a cast that PostgreSQL's message would quote the token in) makes
// that tenant's state `error` with the SQLSTATE and its condition name,
// its rows wait, and no value of the row is quoted anywhere; the other
// tenants go on.
func TestQueryFailingForOneTenantIsItsErrorState(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	b.exec(t, `INSERT INTO connections (account, url, token, portal_id) VALUES
		('acme', $1, 'tok-secret-acme', 0), ('globex', $2, 'tok-secret-globex', 1), ('initech', $3, 'tok-secret-initech', 2)`,
		b.url+"/t/acme", b.url+"/t/globex", b.url+"/t/initech")
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{
		// acme: 1/0; initech: its token cast to an integer, which
		// PostgreSQL's message would quote ("invalid input syntax for
		// type integer: \"tok-secret-initech\"").
		Query: `SELECT url, token FROM connections WHERE account = $1 AND 1 / portal_id >= 0
			AND CASE WHEN portal_id = 2 THEN token::int > 0 ELSE true END`,
	}})

	_, err := deliver(t, r, "acme", 1)
	require.Error(t, err, "acme's rows wait")
	require.ErrorContains(t, err, "22012 division_by_zero")
	state, text := b.stateOf(t, "acme")
	require.Equal(t, "error", state, text)
	require.Contains(t, text, "SQLSTATE 22012 division_by_zero")

	_, err = deliver(t, r, "initech", 1)
	require.Error(t, err)
	state, text = b.stateOf(t, "initech")
	require.Equal(t, "error", state, text)
	require.Contains(t, text, "22P02 invalid_text_representation")

	_, err = deliver(t, r, "globex", 1)
	require.NoError(t, err, "another tenant goes on")
	require.Zero(t, b.fake.TenantStats().Tenants["acme"].Requests)
	require.NotContains(t, b.logs.String(), "not of the column's type", "the error is called what it is")
	b.requireNoSecret(t, "tok-secret-")

	// Fixed in the table: the tenant is read again and goes.
	b.exec(t, `UPDATE connections SET portal_id = 1 WHERE account = 'acme'`)
	b.clock.Advance(tenants.UnconnectedEvery)
	_, err = deliver(t, r, "acme", 1)
	require.NoError(t, err)
	state, _ = b.stateOf(t, "acme")
	require.Equal(t, "ok", state)
}

// Issue 54 point 5: a tenant value that is empty, "." or "..", or holds
// a control character, is never sent anywhere (not in a request's path,
// not to the token endpoint): the tenant's state is `invalid` with the
// reason, its rows wait.
func TestTenantValuesThatAreNeverSent(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-", RefreshPrefix: "rt-secret-"}})
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		b.fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	bad := []string{"", ".", "..", "a\nb", "tab\there", "del\x7f"}

	// The destination's URL with {tenant}, no query.
	plain := b.registry(t, tenants.Config{ThirdParty: thirdparty.Config{URL: srv.URL + "/t/{tenant}"}})
	// A refresh token per row, at a token endpoint with {tenant}.
	for _, tn := range bad {
		b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ($1, 'rt-secret-x')`, tn)
	}
	granted := b.registry(t, tenants.Config{
		Settings:   &tenants.Settings{Query: `SELECT refresh_token FROM connections WHERE account = $1`},
		ThirdParty: thirdparty.Config{URL: srv.URL + "/t/{tenant}"},
		TokenURL:   srv.URL + "/t/{tenant}/oauth/token",
	})
	for _, r := range []*tenants.Registry{plain, granted} {
		for _, tn := range bad {
			_, err := deliver(t, r, tn, 1)
			require.Error(t, err, "tenant %q", tn)
			state, text := b.stateOf(t, tenant.Tenant(tn))
			require.Equal(t, "invalid", state, "tenant %q", tn)
			require.NotEmpty(t, text)
		}
	}
	mu.Lock()
	require.Empty(t, paths, "nothing was sent for these tenants")
	mu.Unlock()
	state, text := b.stateOf(t, "..")
	require.Equal(t, "invalid", state)
	require.Contains(t, text, "a path segment of its own")

	// A value that only looks odd is sent, escaped (the fake refuses its
	// token: this is about where it went).
	_, _ = deliver(t, plain, "a/..", 1)
	mu.Lock()
	require.NotEmpty(t, paths)
	for _, p := range paths {
		require.Contains(t, p, "/t/a%2F../")
	}
	mu.Unlock()
}

// Issue 54 point 3: the connections table locked (a migration's LOCK
// TABLE ... ACCESS EXCLUSIVE): a tenant whose credentials are held goes
// on with them past RefreshEvery rather than waiting for the lock; a
// tenant without them waits, its state `error` naming the timeout; and
// however many lanes ask at once, at most 2 of the pool's connections
// wait on the lock.
func TestLockedConnectionsTableHoldsNoConnectedTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	b.exec(t, `INSERT INTO connections (account, url, token) SELECT g, $1 || '/t/' || g, 'tok-secret-' || g FROM generate_series(1, 20) g`, b.url)
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tokenQuery}}) // tenants.timeout 5 s
	_, err := deliver(t, r, "1", 1)
	require.NoError(t, err)

	// The lock, held until the test ends.
	locker, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = locker.Rollback(context.Background()) })
	_, err = locker.Exec(t.Context(), `LOCK TABLE connections IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	// Many lanes ask for tenants never read, at once, while the
	// connections waiting on the lock are counted.
	var most atomic.Int64
	watching, stopWatch := context.WithCancel(t.Context())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watching.Err() == nil {
			var n int64
			if err := b.pool.QueryRow(watching, `SELECT count(*) FROM pg_locks WHERE relation = 'connections'::regclass AND NOT granted`).Scan(&n); err == nil && n > most.Load() {
				most.Store(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			_, err := r.For(t.Context(), "new-"+string(rune('a'+i)))
			errs <- err
		})
	}
	// A connected tenant, its row due again, meanwhile.
	b.clock.Advance(tenants.RefreshEveryDefault + time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := deliver(t, r, "1", 2)
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "the connected tenant sends with the row it holds")
	case <-time.After(20 * time.Second):
		t.Fatal("the connected tenant waits for the locked table (the lock is held until the test ends)")
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(60 * time.Second):
		t.Fatal("tenants without a row wait for the locked table (the lock is held until the test ends)")
	}
	close(errs)
	stopWatch()
	<-watched
	for err := range errs {
		require.Error(t, err, "a tenant never read waits")
	}
	t.Logf("at most %d connections waited on the lock at once", most.Load())
	require.LessOrEqual(t, most.Load(), int64(2), "connections waiting on the lock at once")
	require.Equal(t, int64(3), b.fake.TenantStats().Tenants["1"].ItemsAccepted)
	state, text := b.stateOf(t, "new-a")
	if state != "ok" { // one that waited for a slot and gave up has no state written
		require.Equal(t, "error", state)
		require.Contains(t, text, "tenants.timeout")
	}

	// The lock released: the tenants go.
	require.NoError(t, locker.Rollback(t.Context()))
	b.clock.Advance(tenants.UnconnectedEvery)
	require.Eventually(t, func() bool {
		_, err := deliver(t, r, "2", 1)
		return err == nil
	}, 20*time.Second, 50*time.Millisecond)
	b.requireNoSecret(t, "tok-secret-")
}
