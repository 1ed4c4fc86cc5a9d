package migrations_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/migrations"
)

// migratedTo returns a pool on a schema of its own, and the schema's name,
// as a release whose last migration is last left it (0: every migration).
func migratedTo(t *testing.T, last int) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := t.Context()
	dsn, schema := dbtest.NewSchema(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = migrations.UpTo(ctx, pool, last)
	require.NoError(t, err)
	return pool, schema
}
