package replays_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
)

func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return dbtest.NewMigrated(t).Pool
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := resources.Filter{FromID: 10, ToID: 20, Since: since, FailedOnly: true}
	id, err := replays.Create(ctx, pool, f, 11)
	require.NoError(t, err)

	r, err := replays.Load(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, replays.StatePending, r.State)
	require.Equal(t, int64(11), r.TotalRows)
	require.Equal(t, f.FromID, r.Filter.FromID)
	require.Equal(t, f.ToID, r.Filter.ToID)
	require.True(t, since.Equal(r.Filter.Since))
	require.True(t, r.Filter.Until.IsZero())
	require.True(t, r.Filter.FailedOnly)
	require.True(t, r.FinishedAt.IsZero())

	waiting, err := replays.AnyWaiting(ctx, pool)
	require.NoError(t, err)
	require.True(t, waiting)

	require.NoError(t, replays.Start(ctx, pool, id))
	s, err := replays.StateOf(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, replays.StateRunning, s)

	ok, err := replays.Finish(ctx, pool, id)
	require.NoError(t, err)
	require.True(t, ok)
	r, err = replays.Load(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, replays.StateDone, r.State)
	require.False(t, r.FinishedAt.IsZero())
	require.InDelta(t, 100.0, r.Percent(3), 0.001)

	// Final states stay final.
	require.NoError(t, replays.Start(ctx, pool, id))
	require.ErrorIs(t, replays.Cancel(ctx, pool, id), replays.ErrFinished)
	s, err = replays.StateOf(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, replays.StateDone, s)

	waiting, err = replays.AnyWaiting(ctx, pool)
	require.NoError(t, err)
	require.False(t, waiting)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	id, err := replays.Create(ctx, pool, resources.Filter{FromID: 1}, 5)
	require.NoError(t, err)
	require.NoError(t, replays.Start(ctx, pool, id))

	cancelled, err := replays.Cancelled(ctx, pool, id)
	require.NoError(t, err)
	require.False(t, cancelled)

	require.NoError(t, replays.Cancel(ctx, pool, id))
	cancelled, err = replays.Cancelled(ctx, pool, id)
	require.NoError(t, err)
	require.True(t, cancelled)

	// A cancelled replay is neither started, finished nor cancelled again.
	require.NoError(t, replays.Start(ctx, pool, id))
	ok, err := replays.Finish(ctx, pool, id)
	require.NoError(t, err)
	require.False(t, ok)
	err = replays.Cancel(ctx, pool, id)
	require.ErrorIs(t, err, replays.ErrFinished)
	require.Contains(t, err.Error(), "cancelled")
	r, err := replays.Load(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, replays.StateCancelled, r.State)
	require.True(t, r.State.Finished())
}

func TestUnknownID(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	_, err := replays.Load(ctx, pool, 42)
	require.ErrorIs(t, err, replays.ErrNotFound)
	_, err = replays.StateOf(ctx, pool, 42)
	require.ErrorIs(t, err, replays.ErrNotFound)
	require.ErrorIs(t, replays.Cancel(ctx, pool, 42), replays.ErrNotFound)
	cancelled, err := replays.Cancelled(ctx, pool, 42)
	require.NoError(t, err)
	require.True(t, cancelled, "a replay that no longer exists is not sent")
}

func TestListAndRecent(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	var ids []int64
	for i := range 8 {
		id, err := replays.Create(ctx, pool, resources.Filter{FromID: int64(i + 1)}, 1)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	// ids[0] and ids[5] stay unfinished; the rest finish.
	for _, i := range []int{1, 2, 3, 4, 6} {
		_, err := replays.Finish(ctx, pool, ids[i])
		require.NoError(t, err)
	}
	require.NoError(t, replays.Cancel(ctx, pool, ids[7]))

	all, err := replays.List(ctx, pool)
	require.NoError(t, err)
	require.Len(t, all, 8)
	for i, r := range all {
		require.Equal(t, ids[i], r.ID, "sorted by id")
	}

	recent, err := replays.Recent(ctx, pool, 2)
	require.NoError(t, err)
	var got []int64
	for _, r := range recent {
		got = append(got, r.ID)
	}
	require.Equal(t, []int64{ids[0], ids[5], ids[6], ids[7]}, got, "unfinished ones and the last two finished, by id")

	unfinished, err := replays.Unfinished(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0], ids[5]}, unfinished)
}

func TestPercent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		r    replays.Replay
		done int64
		want float64
	}{
		{"running half", replays.Replay{State: replays.StateRunning, TotalRows: 100}, 50, 50},
		{"done whatever it counted", replays.Replay{State: replays.StateDone, TotalRows: 100}, 10, 100},
		{"pending empty", replays.Replay{State: replays.StatePending}, 0, 0},
		{"capped", replays.Replay{State: replays.StateRunning, TotalRows: 100}, 120, 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tt.want, tt.r.Percent(tt.done), 0.001)
		})
	}
}
