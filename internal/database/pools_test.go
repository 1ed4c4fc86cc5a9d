package database_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

// Through PgBouncer in transaction mode (stock settings) with a direct URL
// beside it: the pool is stateless, and its statements work whatever
// server session each round trip lands on, a []byte for a jsonb among
// them (QueryExecModeExec sent it as a bytea's text, which no jsonb
// parses); the session's config is the direct URL's. A URL that sets a
// session parameter, or a schema the role's search_path does not put
// first, is refused with the ALTER ROLE that fixes it; without the direct
// URL it opens, and nothing may hold session state (NoSession).
func TestOpenPoolsThroughTransactionPooling(t *testing.T) {
	t.Parallel()
	dsn, schema := dbtest.NewSchema(t)
	role := dbtest.NewRole(t, schema)
	pgb := dbtest.StartPgBouncer(t, "transaction", role)
	u, err := url.Parse(pgb.URL(t, dsn))
	require.NoError(t, err)
	u.User = url.User(role)
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	pooled := u.String()
	ctx := context.Background()

	var p *database.Pools
	require.NoError(t, retryReset(t, func() (err error) {
		p, err = database.OpenPools(ctx, pooled, dsn, "syncer run", schema)
		return err
	}), pgb.Log())
	defer p.Close()
	require.True(t, p.Stateless)
	require.NotEqual(t, p.Pool.Config().ConnConfig.Port, p.Session.Port, "the session is the direct URL's")

	// Many round trips, each a transaction of its own that PgBouncer may
	// hand to another server session: the same statement, described once.
	for i := range 20 {
		var got string
		require.NoError(t, p.Pool.QueryRow(ctx, "SELECT $1::jsonb ->> 'a'", []byte(`{"a":"x"}`)).Scan(&got), "round %d", i)
		require.Equal(t, "x", got)
	}
	b := &pgx.Batch{}
	b.Queue("SELECT $1::jsonb", []byte(`{"b":1}`))
	b.Queue("SELECT $1::bigint[]", []int64{1, 2})
	require.NoError(t, p.Pool.SendBatch(ctx, b).Close())
	var prepared int
	require.NoError(t, p.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&prepared))
	require.Zero(t, prepared, "nothing prepared by name")

	var ue interface{ IsUsage() bool }
	_, err = database.OpenPools(ctx, pooled+"&jit=off", dsn, "syncer run", "")
	require.Error(t, err)
	require.True(t, errors.As(err, &ue) && ue.IsUsage(), "%v", err)
	require.Contains(t, err.Error(), "ALTER ROLE")
	require.Contains(t, err.Error(), "jit")

	_, err = database.OpenPools(ctx, pooled, dsn, "syncer run", "another_schema")
	require.Error(t, err)
	require.Contains(t, err.Error(), `search_path = "another_schema"`)

	alone, err := database.OpenPools(ctx, pooled, "", "syncer run", schema)
	require.NoError(t, err, "without SYNCER_DIRECT_URL: nothing holds session state")
	defer alone.Close()
	require.True(t, alone.Stateless)
	require.True(t, alone.NoSession)
	require.False(t, p.NoSession, "with the direct URL its session holds state")

	_, err = database.OpenPools(ctx, dsn, pooled, "syncer run", schema)
	require.ErrorIs(t, err, database.ErrTransactionPooling, "a direct URL through a transaction pooler")
	require.Contains(t, err.Error(), "SYNCER_DIRECT_URL (")
}
