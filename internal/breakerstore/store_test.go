package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

type testBundle struct {
	dsn, schema string
	pool        *pgxpool.Pool
	store       *breakerstore.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	dsn, schema := dbtest.NewSchema(t)
	b := &testBundle{dsn: dsn, schema: schema}
	b.pool, b.store = b.newStore(t)
	_, err := migrations.Up(context.Background(), b.pool, nil)
	require.NoError(t, err)
	return b
}

// newStore opens another pool on the same schema, as another daemon would.
func (b *testBundle) newStore(t *testing.T) (*pgxpool.Pool, *breakerstore.Store) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), b.dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := breakerstore.New(pool, &breakerstore.Config{Schema: b.schema})
	require.NoError(t, err)
	return pool, s
}

func TestGetSetData(t *testing.T) {
	t.Parallel()
	b := setup(t)

	got, err := b.store.GetData("gobreaker:state:x")
	require.NoError(t, err)
	require.Nil(t, got, "a missing key is no data, as gobreaker expects")

	require.NoError(t, b.store.SetData("gobreaker:state:x", []byte(`{"state":2}`)))
	require.NoError(t, b.store.SetData("gobreaker:state:x", []byte(`{"state":1}`)))
	_, other := b.newStore(t)
	got, err = other.GetData("gobreaker:state:x")
	require.NoError(t, err)
	require.JSONEq(t, `{"state":1}`, string(got))
}

func TestLockIsExclusiveAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	otherPool, other := b.newStore(t)

	require.NoError(t, b.store.Lock("m"))
	require.ErrorIs(t, b.store.Lock("m"), breakerstore.ErrLocked, "not reentrant within a process")
	require.ErrorIs(t, other.Lock("m"), breakerstore.ErrLocked)
	require.NoError(t, other.Lock("another"), "names are independent")
	require.NoError(t, other.Unlock("another"))
	require.NoError(t, b.store.Unlock("m"))
	require.Error(t, b.store.Unlock("m"), "unlock of a mutex not held")

	require.NoError(t, other.Lock("m"))
	// The holder dies without unlocking: its session ends and so does the
	// lock, with no lease to wait out.
	key := locks.Key(breakerstore.LockNamespace, b.schema+":m")
	var ended bool
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT bool_and(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1`,
		int64(uint32(uint64(key)>>32)), int64(uint32(key))).Scan(&ended))
	require.True(t, ended)
	require.Eventually(t, func() bool {
		if b.store.Lock("m") != nil {
			return false
		}
		require.NoError(t, b.store.Unlock("m"))
		return true
	}, 5*time.Second, 20*time.Millisecond)
	// Unlock on the dead session fails and gives the connection up, so the
	// pool can still close.
	require.Error(t, other.Unlock("m"))
	otherPool.Close()
}

func TestLockScopedBySchema(t *testing.T) {
	t.Parallel()
	a, c := setup(t), setup(t)
	require.NoError(t, a.store.Lock("m"))
	require.NoError(t, c.store.Lock("m"))
	require.NoError(t, a.store.Unlock("m"))
	require.NoError(t, c.store.Unlock("m"))
}

func TestSetCredentialsReportsChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	changed, err := b.store.SetCredentials(ctx, false, "")
	require.NoError(t, err)
	require.False(t, changed, "nothing recorded and nothing refused: no change")

	changed, err = b.store.SetCredentials(ctx, true, "third party answered 401")
	require.NoError(t, err)
	require.True(t, changed)
	var raw []byte
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1`, breakerstore.KeyCredentials).Scan(&raw))
	require.Contains(t, string(raw), `"refused":true`)
	require.Contains(t, string(raw), `"message":"third party answered 401"`)
	require.Contains(t, string(raw), `"since":`)

	changed, err = b.store.SetCredentials(ctx, true, "third party answered 401")
	require.NoError(t, err)
	require.False(t, changed, "a second refusal is not a transition")

	changed, err = b.store.SetCredentials(ctx, false, "")
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT value FROM syncer_state WHERE key = $1`, breakerstore.KeyCredentials).Scan(&raw))
	require.Contains(t, string(raw), `"refused":false`)
}
