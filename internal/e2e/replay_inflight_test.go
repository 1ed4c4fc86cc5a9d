package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/operator"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
)

// TestOldReplayInFlightFinishesUnderTheOneModel: a replay of resources as
// the release before the one replay model left it at an upgrade (issue
// 46): its row written by the old create (same table shape: no migration),
// running, half sent (its checkpoint at id 150), and the River job the old
// command inserted outside the relay's lock still available beside the
// one the relay makes. The new daemon finishes it from its checkpoint:
// the other half sent once each under the replay's keys, nothing of the
// first half again, no pair under two keys, and at most one job of
// resources pending once it is done. Its progress reads through the one
// model, as --list and the console show it.
func TestOldReplayInFlightFinishesUnderTheOneModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, fakethirdparty.Config{})
	const rows = 300
	b.fill(t, rows)
	b.exec(t, `UPDATE resources SET synced_at = now()`)
	var id int64
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO syncer_replays (from_id, to_id, since, until, failed_only, total_rows, state)
		VALUES (1, $1, NULL, NULL, false, $1, 'running') RETURNING id`, rows).Scan(&id))
	b.exec(t, `INSERT INTO syncer_checkpoints (name, last_id, rows_done, batches_done) VALUES ($1, 150, 150, 3)`, checkpoint.Replay(id))
	b.exec(t, `INSERT INTO river_job (kind, args, state, max_attempts, queue, priority)
		VALUES ($1, $2, 'available', $3, $4, 1)`,
		jobs.ExportArgs{}.Kind(), fmt.Sprintf(`{"source": %q}`, jobs.Resources), jobs.MaxAttempts, jobs.Queue)

	b.startDaemon(t, nil)
	waitFor(t, time.Minute, "the old replay done", func() bool {
		st, err := replays.StateOf(ctx, b.pool, id)
		require.NoError(t, err)
		return st == replays.StateDone
	})
	got := byID(b.fake)
	for i := 1; i <= rows; i++ {
		want := 0
		if i > 150 {
			want = 1
		}
		require.Len(t, got[fmt.Sprint(i)], want, "row %d", i)
	}
	require.Zero(t, b.fake.Stats().DuplicatesOtherKey, "a pair under two keys")

	p, err := replays.ProgressOfOne(ctx, b.pool, nil, id)
	require.NoError(t, err)
	require.Equal(t, int64(rows), p.Sent, "the old half and the new half")
	require.True(t, p.Over)
	require.Equal(t, "rows", p.Unit)

	// A replay started through the model after the upgrade goes through
	// the relay: no job of resources beside the relay's.
	plan, err := operator.PlanReplay(ctx, b.pool, replays.Request{Source: jobs.Resources, Filter: resources.Filter{FromID: 1, ToID: 10}})
	require.NoError(t, err)
	next, err := plan.Start(ctx, b.pool)
	require.NoError(t, err)
	waitFor(t, time.Minute, "the new replay done", func() bool {
		st, err := replays.StateOf(ctx, b.pool, next)
		require.NoError(t, err)
		return st == replays.StateDone
	})
	require.Len(t, byID(b.fake)["5"], 1, "row 5 of the new replay, once")
	var pending int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'source' = $2
		AND state IN ('available', 'scheduled', 'retryable', 'pending')`, jobs.ExportArgs{}.Kind(), jobs.Resources).Scan(&pending))
	require.LessOrEqual(t, pending, 1, "at most one job of resources pending")
}
