package replays_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/resources"
)

// TestPlanAndStartOfResources: resources' Table takes ids as keys and
// refuses a range it cannot take; a plan counts without recording; Start
// records the replay and wakes resources through the outbox in one
// transaction, and inserts no River job (the relay alone does, under its
// lock); a plan of no row starts nothing.
func TestPlanAndStartOfResources(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g`)
	require.NoError(t, err)
	count := func(table string) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
		return n
	}
	outboxBefore := count("syncer_outbox")

	plan, err := replays.PlanReplay(ctx, pool, replays.Resources, replays.Request{Range: replays.SourceRange{FromKey: " 3", ToKey: "7"}})
	require.NoError(t, err)
	require.Equal(t, int64(5), plan.Count)
	require.Equal(t, jobs.Resources, plan.Source)
	require.Equal(t, resources.Filter{FromID: 3, ToID: 7}, plan.Filter, "keys of resources are its ids")
	require.Zero(t, count("syncer_replays"), "a plan records nothing")

	for _, bad := range []replays.Request{
		{Range: replays.SourceRange{FromKey: "abc"}},
		{Range: replays.SourceRange{FromKey: "7", ToKey: "3"}},
		{Range: replays.SourceRange{ChangedColumn: "updated_at"}},
		{Filter: resources.Filter{FromID: 9, ToID: 2}},
	} {
		_, err := replays.PlanReplay(ctx, pool, replays.Resources, bad)
		require.ErrorIs(t, err, replays.ErrBadRange, "%+v", bad)
	}

	id, err := plan.Start(ctx, pool)
	require.NoError(t, err)
	rp, err := replays.Load(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, resources.Filter{FromID: 3, ToID: 7}, rp.Filter)
	require.Equal(t, int64(5), rp.TotalRows)
	require.Equal(t, outboxBefore+1, count("syncer_outbox"), "resources woken through the outbox")
	require.Zero(t, count("river_job"), "no job inserted outside the relay")

	p, err := replays.ProgressOfOne(ctx, pool, nil, id)
	require.NoError(t, err)
	require.Equal(t, "rows", p.Unit)
	require.Zero(t, p.Sent)
	require.False(t, p.Over)

	none, err := replays.PlanReplay(ctx, pool, replays.Resources, replays.Request{Filter: resources.Filter{FromID: 100}})
	require.NoError(t, err)
	_, err = none.Start(ctx, pool)
	require.ErrorContains(t, err, "no row matches the range: nothing to replay, no replay created")
	require.Equal(t, 1, count("syncer_replays"))
}
