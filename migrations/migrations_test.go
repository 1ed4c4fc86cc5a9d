package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/migrations"
)

func TestUpIsIdempotentAndSafeConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, schema := dbtest.NewSchema(t)

	// Four migrators at once, as four deploys starting together would.
	var wg sync.WaitGroup
	results := make([]*migrations.Result, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() {
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			results[i], errs[i] = migrations.Up(ctx, pool, nil)
		})
	}
	wg.Wait()
	applied := 0
	for i := range 4 {
		require.NoError(t, errs[i])
		require.Equal(t, schema, results[i].Schema)
		applied += len(results[i].Applied)
	}
	all, err := migrations.All()
	require.NoError(t, err)
	require.Equal(t, len(all), applied, "each migration applied exactly once")

	p, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer p.Close()
	again, err := migrations.Up(ctx, p, nil)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
	require.Empty(t, again.RiverApplied)

	// The contract's table, as any client would use it.
	var id, version int64
	require.NoError(t, p.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ('{"a": 1}') RETURNING id, version`).Scan(&id, &version))
	require.Equal(t, int64(1), version)
	require.NoError(t, p.QueryRow(ctx, `UPDATE resources SET payload = '{"a": 2}' WHERE id = $1 RETURNING version`, id).Scan(&version))
	require.Equal(t, int64(2), version)
}

func TestChannelFitsPostgresLimit(t *testing.T) {
	t.Parallel()
	require.Equal(t, "syncer_outbox.public", migrations.Channel("public"))
	long := migrations.Channel(string(make([]byte, 100)))
	require.Len(t, long, 63)
}
