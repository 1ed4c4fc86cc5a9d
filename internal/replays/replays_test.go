package replays_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	id, err := replays.Create(ctx, pool, replays.Request{Filter: f}, 11)
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
	id, err := replays.Create(ctx, pool, replays.Request{Filter: resources.Filter{FromID: 1}}, 5)
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
		id, err := replays.Create(ctx, pool, replays.Request{Filter: resources.Filter{FromID: int64(i + 1)}}, 1)
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

// A source replay's range and cursor live in its row: what Create
// stores, LockSourceCursor reads, AdvanceSourceCursor moves and
// SourcesProgress reports.
func TestSourceCursorRoundTrip(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rng := replays.SourceRange{FromKey: "10", ToKey: "20", Since: since, ChangedColumn: "updated_at"}
	id, err := replays.Create(ctx, pool, replays.Request{Source: "orders", Range: rng}, 11)
	require.NoError(t, err)
	whole, err := replays.Create(ctx, pool, replays.Request{Source: "tags", Range: replays.SourceRange{}}, 3)
	require.NoError(t, err)
	ofResources, err := replays.Create(ctx, pool, replays.Request{Filter: resources.Filter{FromID: 1}}, 1)
	require.NoError(t, err)

	// A source replay's since bounds its changed column: no Filter.
	r, err := replays.Load(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, "orders", r.Source)
	require.Equal(t, resources.Filter{}, r.Filter)

	lock := func(id int64) (replays.SourceCursor, error) {
		var c replays.SourceCursor
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			c, err = replays.LockSourceCursor(ctx, tx, id)
			return err
		})
		return c, err
	}
	c, err := lock(id)
	require.NoError(t, err)
	require.Equal(t, replays.StatePending, c.State)
	require.Equal(t, "10", c.Range.FromKey)
	require.Equal(t, "20", c.Range.ToKey)
	require.True(t, since.Equal(c.Range.Since))
	require.True(t, c.Range.Until.IsZero())
	require.Equal(t, "updated_at", c.Range.ChangedColumn)
	require.Nil(t, c.AfterKey, "nothing logged yet")

	// Two chunks, the second logging nothing: the cursor stays.
	for _, step := range []struct {
		key          *string
		logged, last int64
	}{{key: ptr("14"), logged: 5, last: 40}, {logged: 0, last: 0}} {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := replays.LockSourceCursor(ctx, tx, id); err != nil {
				return err
			}
			return replays.AdvanceSourceCursor(ctx, tx, id, step.key, step.logged, step.last)
		}))
	}
	c, err = lock(id)
	require.NoError(t, err)
	require.NotNil(t, c.AfterKey)
	require.Equal(t, "14", *c.AfterKey)

	progress, err := replays.SourcesProgress(ctx, pool)
	require.NoError(t, err)
	require.Len(t, progress, 2, "replays of sources only")
	require.Equal(t, id, progress[0].ID)
	require.Equal(t, "orders", progress[0].Source)
	require.Equal(t, int64(5), progress[0].KeysLogged)
	require.Equal(t, int64(40), progress[0].LastSeq)
	require.Equal(t, c.Range.FromKey, progress[0].Range.FromKey)
	require.True(t, since.Equal(progress[0].Range.Since))
	require.Equal(t, whole, progress[1].ID)
	require.Equal(t, replays.SourceRange{}, progress[1].Range)
	require.Zero(t, progress[1].KeysLogged)

	// One chunk at a time: a cursor held is not waited for.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = replays.LockSourceCursor(ctx, tx, id)
	require.NoError(t, err)
	_, err = lock(id)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code, "lock_not_available")
	require.NoError(t, tx.Rollback(ctx))

	// Cancelled since it was chosen: its final state says to skip it.
	require.NoError(t, replays.Cancel(ctx, pool, id))
	c, err = lock(id)
	require.NoError(t, err)
	require.True(t, c.State.Finished())

	_, err = lock(ofResources)
	require.ErrorIs(t, err, replays.ErrNotFound, "a replay of resources has no source cursor")
	_, err = lock(987654)
	require.ErrorIs(t, err, replays.ErrNotFound)
}

func ptr(s string) *string { return &s }

// Issue 54, found by the five-workspace walk-through: a tenant's replay
// queued its 41 keys (state done) while the tenant was refused, and
// `replay --list` and `status` said "done, 0 of 41 keys ... (100.0%)".
// Until its last key is sent a replay of a source's keys is "sending" and
// its share is what was sent.
func TestProgressOfAQueuedSourceReplayIsNotDone(t *testing.T) {
	queued := replays.Progress{Replay: replays.Replay{ID: 1, Source: "contacts", State: replays.StateDone, TotalRows: 41}, Queued: 41}
	require.Equal(t, replays.StateSending, queued.ShownState())
	require.InDelta(t, 0.0, queued.Percent(), 0.001)

	queued.Sent = 10
	require.InDelta(t, 100*10/41.0, queued.Percent(), 0.001)

	queued.Sent, queued.Over = 41, true
	require.Equal(t, replays.StateDone, queued.ShownState())
	require.InDelta(t, 100.0, queued.Percent(), 0.001)

	rows := replays.Progress{Replay: replays.Replay{ID: 2, State: replays.StateDone, TotalRows: 10}, Sent: 8, Over: true}
	require.Equal(t, replays.StateDone, rows.ShownState())
	require.InDelta(t, 100.0, rows.Percent(), 0.001)
}
