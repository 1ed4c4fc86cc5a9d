package database_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

// Through a transaction pooler, a role without
// idle_in_transaction_session_timeout is told the ALTER ROLE that sets it;
// a role with it is told nothing.
func TestRoleAdviceThroughTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, set := range []bool{false, true} {
		dsn, schema := dbtest.NewSchema(t)
		tx := dbtest.StartTxPooler(t, dsn, schema)
		if set {
			// Before the pooler's first server session of the role.
			conn, err := pgx.Connect(ctx, dsn)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, "ALTER ROLE "+pgx.Identifier{tx.Role}.Sanitize()+" SET idle_in_transaction_session_timeout = '10s'")
			require.NoError(t, conn.Close(ctx))
			require.NoError(t, err)
		}
		var p *database.Pools
		require.NoError(t, retryReset(t, func() (err error) {
			p, err = database.OpenPools(ctx, tx.Pooled, tx.Direct, "syncer run", schema)
			return err
		}), tx.Log())
		advice, err := database.RoleAdvice(ctx, p.Pool)
		p.Close()
		require.NoError(t, err)
		if set {
			require.Empty(t, advice)
			continue
		}
		require.Contains(t, advice, "ALTER ROLE "+pgx.Identifier{tx.Role}.Sanitize()+" SET idle_in_transaction_session_timeout = '10s'")
	}
}
