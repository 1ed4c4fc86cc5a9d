package tenants_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// Contract section 10.1, "The query never holds the export", on a pool as
// the daemon opens it (4 connections, no cancel request: a statement its
// context cuts short ends its connection, whose close waits for the
// server): with the connections table locked, a read of a tenant's row on
// a connection that never ran the query (a new one, as the pool opens to
// replace those it closed) ends by the server's lock timeout
// (tenants.timeout), and the connection goes back to the pool, not into
// the lock's queue. On c24a0a1 the query's statement was prepared in a
// round trip of its own, before the batch that sets the timeouts: the
// prepare waited on the lock until the read's context ended, the
// connection was closed, and its close held a slot of the pool 15 s
// more, while its server session stayed in the lock's queue: the
// daemon's pool, River's included, was soon all theirs (CI, the e2e
// TestLockedConnectionsTableStopsNoOtherSource).
func TestLockedConnectionsTableKeepsThePool(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `INSERT INTO connections (account, url, token) SELECT 'w' || i, $1, 'tok' FROM generate_series(1, 8) i`, b.url+"/t/w")
	const timeout = time.Second
	settings := &tenants.Settings{Query: tokenQuery, Timeout: timeout}
	for _, tt := range []struct {
		name string
		// read reads under the lock, which it takes, and says when it
		// started.
		read func(t *testing.T, r *tenants.Registry, pool *pgxpool.Pool) (time.Time, error)
	}{
		{"a tenant never read", func(t *testing.T, r *tenants.Registry, _ *pgxpool.Pool) (time.Time, error) {
			lock(t, b)
			start := time.Now()
			_, err := r.For(t.Context(), "w1")
			return start, err
		}},
		// Reread's pass ends at the first round trip that could not run:
		// the others would each wait tenants.timeout to learn the same.
		{"idle tenants read again", func(t *testing.T, r *tenants.Registry, pool *pgxpool.Pool) (time.Time, error) {
			for i := 2; i <= 8; i++ {
				_, err := r.For(t.Context(), fmt.Sprintf("w%d", i))
				require.NoError(t, err)
			}
			pool.Reset() // connections that never ran the query
			b.clock.Advance(tenants.RefreshEveryDefault)
			lock(t, b)
			start := time.Now()
			r.Reread(t.Context())
			return start, nil
		}},
	} {
		// Directly (statements prepared) and as through a transaction
		// pooler (none: pgx's description cache).
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
			t.Run(tt.name+"/"+mode.String(), func(t *testing.T) {
				pool := daemonPool(t, b, mode)
				r := b.registry(t, tenants.Config{Settings: settings, Pool: pool, Replay: (&replayCalls{}).replay})
				start, err := tt.read(t, r, pool)
				took := time.Since(start)
				t.Logf("the read ended after %s: %v", took.Round(time.Millisecond), err)
				if err != nil {
					var qe *tenants.QueryError
					require.True(t, errors.As(err, &qe), "the server's lock timeout ended the read, not its context: %v", err)
					require.True(t, qe.Transient(), qe.State)
				}
				require.Less(t, took, timeout+time.Second, "tenants.timeout bounds the read")

				requirePoolWhole(t, b, pool)
			})
		}
	}
}

// The same for a tenant whose credentials are a refresh token, its access
// token expired while the table is locked: its grant reads the stored
// token (under the tenant's refresh lock) with the query's lock timeout,
// and the request fails in tenants.timeout, transient, its connection
// back in the pool. On c24a0a1 the read waited until the request's
// context ended (thirdparty's timeout, 5 s here), then its connection's
// close held a slot of the pool 15 s more.
func TestLockedConnectionsTableKeepsThePoolFromARefreshGrant(t *testing.T) {
	t.Parallel()
	b := setup(t, rotating(false, time.Second))
	b.exec(t, `INSERT INTO connections (account, refresh_token) VALUES ('acme', 'rt-secret-acme')`)
	const timeout = time.Second
	pool := daemonPool(t, b, pgx.QueryExecModeCacheStatement)
	cfg := refreshConfig(b, b.url+"/t/{tenant}/oauth/token", true)
	cfg.Settings.Timeout, cfg.Pool = timeout, pool
	r := b.registry(t, cfg)
	_, err := deliver(t, r, "acme", 1)
	require.NoError(t, err)

	lock(t, b)
	time.Sleep(1100 * time.Millisecond) // the access token expired
	start := time.Now()
	_, err = deliver(t, r, "acme", 1)
	took := time.Since(start)
	t.Logf("the batch ended after %s: %v", took.Round(time.Millisecond), err)
	// The delivery tries again until its breaker opens: each try's grant
	// ended by the lock timeout, none by the request's context.
	logs := b.logs.String()
	require.Contains(t, logs, "SQLSTATE 55P03", "a grant's read ended by the lock timeout")
	require.NotContains(t, logs, "context deadline exceeded", "a grant's read ended by the request's context")
	requirePoolWhole(t, b, pool)
}

// requirePoolWhole checks that pool gives all its connections at once,
// and that none of b's sessions waits on the connections table's lock.
func requirePoolWhole(t *testing.T, b *bundle, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var held []*pgxpool.Conn
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err, "a connection of the pool, %d of %d given", len(held), pool.Config().MaxConns)
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	var waiting int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE relation = 'connections'::regclass AND NOT granted`).Scan(&waiting))
	require.Zero(t, waiting, "sessions in the lock's queue after the read ended")
}

// daemonPool is a pool of b's schema as the daemon opens it (no cancel
// request), of 4 connections running their statements in mode.
func daemonPool(t *testing.T, b *bundle, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := database.ParseURL(b.dsn + "&pool_max_conns=4")
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// lock takes LOCK TABLE connections IN ACCESS EXCLUSIVE MODE in a session
// of its own until the test ends.
func lock(t *testing.T, b *bundle) {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(t.Context(), `LOCK TABLE connections IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
}

// The same for the read of a tenant's row under its account record's
// lock (noteAccount: a tenant's first read, or its url or account column
// changed), the table locked between the tenant's read and that one: it
// takes a slot of the gate as the registry's reads do, so that at most
// QueryConnsDefault of the daemon's sessions wait on the lock at once,
// each for tenants.timeout. On 68002ef it took a connection outside the
// gate: as many sessions as tenants noting their account (4, the whole
// pool here) waited in the lock's queue.
func TestLockedConnectionsTableKeepsThePoolFromAnAccountRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	const n = 4
	b.exec(t, `INSERT INTO connections (account, url, token) SELECT 'w' || i, $1, 'tok' FROM generate_series(1, $2::int) i`, b.url+"/t/w", n)
	const timeout = time.Second
	pool := daemonPool(t, b, pgx.QueryExecModeCacheStatement)
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tokenQuery, Timeout: timeout}, Pool: pool, Replay: (&replayCalls{}).replay})

	// The account records exist, and a transaction of the test holds
	// them: each tenant's noteAccount, its row read, waits there.
	ns := func(i int) string { return breakerstore.TenantNamespace("crm", tenant.Tenant(fmt.Sprintf("w%d", i))) }
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		for i := 1; i <= n; i++ {
			if _, _, err := breakerstore.LockAccount(t.Context(), tx, ns(i)); err != nil {
				return err
			}
		}
		return nil
	}))
	records, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = records.Rollback(context.Background()) }()
	for i := 1; i <= n; i++ {
		_, _, err := breakerstore.LockAccount(t.Context(), records, ns(i))
		require.NoError(t, err)
	}
	blockedBy := func(tx pgx.Tx) func() int {
		var pid int
		require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid))
		return func() int {
			var k int
			require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&k))
			return k
		}
	}
	atRecords := blockedBy(records)

	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() { _, _ = r.For(t.Context(), fmt.Sprintf("w%d", i)) })
	}
	require.Eventually(t, func() bool { return atRecords() >= min(n, tenants.QueryConnsDefault) }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // any more that would come
	t.Logf("%d sessions wait on the account records", atRecords())

	locker, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(context.Background()) }()
	_, err = locker.Exec(t.Context(), `LOCK TABLE connections IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	atLock := blockedBy(locker)
	require.NoError(t, records.Commit(t.Context()))
	start := time.Now()
	most := 0
	for time.Since(start) < timeout+500*time.Millisecond {
		most = max(most, atLock())
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("at most %d sessions waited on the lock at once; the reads ended after %s", most, took.Round(time.Millisecond))
	require.LessOrEqual(t, most, tenants.QueryConnsDefault, "the account records' reads hold the gate's slots, not the pool")
	require.Less(t, took, 2*timeout+time.Second, "tenants.timeout bounds each read")
	require.Contains(t, b.logs.String(), "SQLSTATE 55P03", "a read ended by the lock timeout")
	requirePoolWhole(t, b, pool)
}

// A command's check that a tenant has a connection row (HasRow: pause,
// probe, verify, replay with --tenant and --config) runs the query with
// tenants.timeout as its statement and lock timeouts: with the table
// locked it fails in that time with a *QueryError naming tenants.timeout
// and the lock, and the command exits 1 rather than hang. On 68002ef it
// waited on the lock with no timeout.
func TestLockedConnectionsTableFailsHasRow(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	const timeout = time.Second
	settings := &tenants.Settings{Query: tokenQuery, Timeout: timeout}
	b.exec(t, `INSERT INTO connections (account, url, token) VALUES ('acme', $1, 'tok-secret')`, b.url+"/t/acme")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		pool := daemonPool(t, b, mode)
		ok, err := tenants.HasRow(t.Context(), pool, settings, "acme")
		require.NoError(t, err)
		require.True(t, ok)
	}
	lock(t, b)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		t.Run(mode.String(), func(t *testing.T) {
			pool := daemonPool(t, b, mode) // connections that never ran the query
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			ok, err := tenants.HasRow(ctx, pool, settings, "acme")
			took := time.Since(start)
			t.Logf("HasRow ended after %s: %v", took.Round(time.Millisecond), err)
			require.False(t, ok)
			var qe *tenants.QueryError
			require.True(t, errors.As(err, &qe), "the server's lock timeout ended the read, not its context: %v", err)
			// Both timeouts are tenants.timeout: either ends the wait.
			require.Contains(t, []string{"55P03", "57014"}, qe.Code)
			require.Contains(t, err.Error(), "tenants.timeout, 1s")
			require.Contains(t, err.Error(), "locked")
			require.NotContains(t, err.Error(), "tok-secret")
			require.Less(t, took, timeout+time.Second, "tenants.timeout bounds the read")
			requirePoolWhole(t, b, pool)
		})
	}
}
