package tenants_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// The token endpoint rotated the tenant's refresh token and on_refresh
// could not store it inside the grant's transaction: the statement
// failed once, or the database ended the connection under it (what a
// PostgreSQL restart does). The store is retried on a connection of its
// own, so the row gives the rotated token soon after, and another
// process's grant (verify --tenant) spends that one: the endpoint, which
// revokes the whole family on reuse, never sees the spent token again.
func TestRotatedRefreshTokenStoreIsRetried(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]string{
		"on_refresh fails once":       `RAISE EXCEPTION 'the store failed once'`,
		"the connection is cut under": `PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5)`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, rotating(true, time.Second))
			b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
			b.exec(t, `CREATE SEQUENCE store_tries`)
			b.exec(t, `CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					IF nextval('store_tries') = 1 THEN `+fail+`; END IF;
					RETURN NEW;
				END $$`)
			b.exec(t, `CREATE TRIGGER fail_once BEFORE UPDATE OF refresh_token ON connections FOR EACH ROW EXECUTE FUNCTION fail_once()`)
			cfg := refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true)
			daemon := b.registry(t, cfg)

			_, err := deliver(t, daemon, "acme", 1)
			require.NoError(t, err, "the grant holds though its store failed")
			require.Eventually(t, func() bool { return b.storedRefresh(t, "acme") == "rt-secret-acme.1" },
				10*time.Second, 10*time.Millisecond, "the rotated token is stored by a retry")
			require.Contains(t, b.logs.String(), "rotated refresh token is stored (on_refresh), after retrying")

			// Another process spends the stored token: the rotated one.
			cfg.Reader = true
			client, _, err := b.registry(t, cfg).Account(t.Context(), "acme")
			require.NoError(t, err)
			_, err = client.Push(t.Context(), "k-verify", []thirdparty.Item{{ID: "1", Version: 1}})
			require.NoError(t, err)
			require.Equal(t, "rt-secret-acme.2", b.storedRefresh(t, "acme"))

			// The daemon's access token expires (1 s): its next grant
			// spends the token stored then.
			time.Sleep(1100 * time.Millisecond)
			_, err = deliver(t, daemon, "acme", 1)
			require.NoError(t, err)
			require.Equal(t, "rt-secret-acme.3", b.storedRefresh(t, "acme"))
			require.Equal(t, fakethirdparty.TokenStats{Grants: 3}, b.fake.TenantStats().Tokens["acme"], "no token spent twice, the family intact")
			require.False(t, strings.Contains(b.logs.String(), "stops without having stored"))
			b.requireNoSecret(t, "tok-secret-", "rt-secret-")
		})
	}
}

// The store retried is a compare-and-store: while it fails, the
// application connects the tenant again and stores a token of its own;
// the retry finds a token this process never spent and leaves it, and
// the next grant asks with the application's.
func TestRetriedStoreKeepsANewerToken(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(true, time.Second))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	b.exec(t, `CREATE FUNCTION fail_rotated() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.refresh_token LIKE 'rt-secret-acme.%' THEN RAISE EXCEPTION 'the store fails'; END IF;
			RETURN NEW;
		END $$`)
	b.exec(t, `CREATE TRIGGER fail_rotated BEFORE UPDATE OF refresh_token ON connections FOR EACH ROW EXECUTE FUNCTION fail_rotated()`)
	daemon := b.registry(t, refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true))

	_, err := deliver(t, daemon, "acme", 1)
	require.NoError(t, err)
	b.exec(t, `UPDATE connections SET refresh_token = 'rt-secret-acme-again' WHERE account = 'acme'`)
	require.Eventually(t, func() bool { return strings.Contains(b.logs.String(), "a refresh token this process never spent") },
		10*time.Second, 10*time.Millisecond)
	require.Equal(t, "rt-secret-acme-again", b.storedRefresh(t, "acme"))

	// The daemon's next grant spends the application's token (which
	// this fake does not know: refused, alone), not the one it held.
	time.Sleep(1100 * time.Millisecond)
	_, err = deliver(t, daemon, "acme", 1)
	require.Error(t, err)
	require.Equal(t, "rt-secret-acme-again", b.storedRefresh(t, "acme"))
	require.Equal(t, fakethirdparty.TokenStats{Grants: 1, Refused: 1}, b.fake.TenantStats().Tokens["acme"])
}

// The database ends the grant's session while the token endpoint is
// being asked (pg_terminate_backend; a restart does the same): the
// session's refresh lock goes with it, but the grant's claim, committed
// before it asked, stays. Another process's grant that comes meanwhile
// waits for the claim rather than spend the token still stored, which
// the endpoint is rotating away from: no reuse, no family revoked.
func TestGrantWhoseSessionEndsMidAskKeepsItsClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(true, time.Hour))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme-midask', 'rt-secret-acme-midask')`)
	target, err := url.Parse(b.url)
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	cfg := refreshConfig(b, "", true)
	readerCfg := cfg
	readerCfg.Reader = true
	var asked atomic.Int64
	var terminated int64
	other := make(chan error, 1)
	var reader *tenants.Registry
	token := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			// The daemon's grant: its session ended under it, and
			// another process's grant started, before its answer.
			// (A tenant of its own: no other test holds its lock.)
			class, key := tenants.RefreshLock("crm", "acme-midask")
			err := b.pool.QueryRow(r.Context(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_locks
				WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2 AND granted AND pid <> pg_backend_pid()`,
				int64(uint32(class)), int64(uint32(key))).Scan(&terminated)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			go func() {
				client, _, err := reader.Account(context.Background(), "acme-midask")
				if err == nil {
					_, err = client.Push(context.Background(), "k-verify", []thirdparty.Item{{ID: "1", Version: 1}})
				}
				other <- err
			}()
			time.Sleep(500 * time.Millisecond)
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(token.Close)
	cfg.TokenURL = token.URL + "/t/{tenant}/oauth/token"
	readerCfg.TokenURL = cfg.TokenURL
	daemon := b.registry(t, cfg)
	reader = b.registry(t, readerCfg)

	_, err = deliver(t, daemon, "acme-midask", 1)
	require.NoError(t, err)
	select {
	case err := <-other:
		require.NoError(t, err, "the other process's grant, after the claim went")
	case <-time.After(30 * time.Second):
		t.Fatal("the other process's grant never ended")
	}
	require.Equal(t, int64(1), terminated, "the grant's session was ended while it asked")
	require.Equal(t, fakethirdparty.TokenStats{Grants: 2}, b.fake.TenantStats().Tokens["acme-midask"], "no token spent twice")
	require.Equal(t, "rt-secret-acme-midask.2", b.storedRefresh(t, "acme-midask"))
	b.requireNoSecret(t, "tok-secret-", "rt-secret-")
}

// A process died mid-grant (SIGKILL) and left its claim of the tenant:
// nothing will touch or release it, so the other processes wait for it
// only claimLife (35 s) from its last touch, not two minutes. The soak
// (seed 20261125) held every row of such a tenant that long, its
// tombstones included, and the whole drain with them.
func TestClaimOfADeadProcessLapses(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(true, time.Hour))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme-dead', 'rt-secret-acme-dead')`)
	daemon := b.registry(t, refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true))
	claim := tenants.ClaimKey("crm", "acme-dead")
	send := func(within time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), within)
		defer cancel()
		d, err := daemon.For(ctx, "acme-dead")
		if err != nil {
			return err
		}
		_, err = d.Deliver(ctx, delivery.Batch{Items: []thirdparty.Item{{ID: "1", Version: 1, Payload: json.RawMessage(`{}`)}}, Source: "contacts", Time: time.Unix(1700000000, 0)})
		return err
	}

	// Touched 5 s ago: its process may be alive and storing; it holds.
	b.exec(t, `INSERT INTO syncer_state (key, value, updated_at) VALUES ($1, 'a-dead-process', now() - interval '5 seconds')`, claim)
	require.Error(t, send(2*time.Second), "a claim touched lately holds the grant")
	require.Zero(t, b.fake.TenantStats().Tokens["acme-dead"].Grants)

	// Untouched for 40 s: its process is gone; the grant goes at once.
	b.exec(t, `UPDATE syncer_state SET updated_at = now() - interval '40 seconds' WHERE key = $1`, claim)
	start := time.Now()
	require.NoError(t, send(10*time.Second), "a claim untouched past claimLife holds nothing")
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, fakethirdparty.TokenStats{Grants: 1}, b.fake.TenantStats().Tokens["acme-dead"])
	require.Equal(t, "rt-secret-acme-dead.1", b.storedRefresh(t, "acme-dead"))
}

// A live process whose rotated token waits to be stored (keepStoring,
// its store failing for a minute between tries) touches its claim, so
// the others never take it for a dead process's and spend the token it
// is rotating away from; another process's claim it leaves alone.
func TestStoringProcessTouchesItsClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(true, time.Hour))
	mine, theirs := tenants.ClaimKey("crm", "acme-touch"), tenants.ClaimKey("crm", "acme-other")
	b.exec(t, `INSERT INTO syncer_state (key, value, updated_at) VALUES ($1, 'me', now() - interval '30 seconds'), ($2, 'me', now() - interval '30 seconds')`, mine, theirs)
	b.exec(t, `UPDATE syncer_state SET value = 'someone else' WHERE key = $1`, theirs)
	require.True(t, tenants.WaitClaimed(t.Context(), b.pool, "crm", "acme-touch", "me", 6*time.Second))
	age := func(key string) float64 {
		var s float64
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT extract(epoch FROM now() - updated_at)::float8 FROM syncer_state WHERE key = $1`, key).Scan(&s))
		return s
	}
	require.Less(t, age(mine), 2.0, "touched as it waited, the last time after 5 s")
	require.Greater(t, age(theirs), 30.0, "another process's claim untouched")
}
