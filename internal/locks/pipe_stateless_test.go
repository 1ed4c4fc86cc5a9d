package locks_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/locks"
)

// A stateless Locker's pipe, its transactions through PgBouncer in
// transaction mode (stock settings, each transaction on whichever server
// session it picks) and its holder on the direct URL: what a transaction
// writes is seen by the next, one sent behind a failed one, not yet
// received, commits nothing, a lock that vanished commits nothing, and no
// statement is left prepared by name (the pipelined pipe's prepared
// statements and its token would be on another server session).
func TestStatelessPipeThroughTransactionPooling(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	role := dbtest.NewRole(t, b.schema)
	pgb := dbtest.StartPgBouncer(t, "transaction", role)
	u, err := url.Parse(pgb.URL(t, b.dsn))
	require.NoError(t, err)
	u.User = url.User(role)
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	ctx := context.Background()
	pools, err := database.OpenPools(ctx, u.String(), b.dsn, "locks test", "")
	require.NoError(t, err, pgb.Log())
	t.Cleanup(pools.Close)
	require.True(t, pools.Stateless)
	locker, err := locks.New(pools.Session, &locks.Config{CheckInterval: checkInterval, Pool: pools.Pool, Stateless: true})
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	lk := b.tryAcquire(t, locker)
	p := lk.NewPipe()

	counts := make([]int, 3)
	for i := range 3 {
		require.NoError(t, p.Send(ctx, func(qb *pgx.Batch) error {
			qb.Queue("INSERT INTO marks (id) VALUES ($1)", i+1)
			qb.Queue("SELECT count(*) FROM marks").QueryRow(func(r pgx.Row) error { return r.Scan(&counts[i]) })
			return nil
		}))
	}
	for range 3 {
		require.NoError(t, p.Receive())
	}
	require.Equal(t, []int{1, 2, 3}, counts)

	require.NoError(t, p.Send(ctx, func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) VALUES (1)") // duplicate key
		return nil
	}))
	require.NoError(t, p.Send(ctx, queueMark(10)))
	require.NoError(t, p.SendChained(ctx, queueMark(11)))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, p.Receive(), &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.ErrorIs(t, p.Receive(), locks.ErrEarlierFailed)
	require.ErrorIs(t, p.Receive(), locks.ErrEarlierFailed)
	require.NoError(t, lk.Err(), "a failed transaction keeps the lock")
	require.Equal(t, 3, b.markCount(t))
	require.NoError(t, p.Send(ctx, queueMark(12)))
	require.NoError(t, p.Receive())
	require.Equal(t, 4, b.markCount(t))

	var prepared int
	require.NoError(t, pools.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements`).Scan(&prepared))
	require.Zero(t, prepared, "nothing prepared by name on the pooled sessions")

	require.NoError(t, locks.Vanish(lk))
	require.ErrorIs(t, withBatch(ctx, lk, queueMark(20)), locks.ErrLockLost)
	require.Equal(t, 4, b.markCount(t), "nothing committed once the lock vanished")
	require.NotContains(t, pgb.Log(), "bad client state")
}
