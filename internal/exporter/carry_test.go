package exporter

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/resources"
)

// poll makes one of r's polls of resources: a carrying pass.
func (b *pipelineBundle) poll(t *testing.T, r *run) (passResult, error) {
	t.Helper()
	res, ok, err := b.e.turnPass(t.Context(), r, b.rows(), feed.Start, 0, time.Time{}, true)
	require.True(t, ok, "the destination's turn is the job's")
	return res, err
}

// sentOnceEach requires every id sent at most once at each version.
func (b *pipelineBundle) sentOnceEach(t *testing.T) {
	t.Helper()
	b.pusher.mu.Lock()
	defer b.pusher.mu.Unlock()
	for id, vs := range b.pusher.sent {
		for i := 1; i < len(vs); i++ {
			require.Less(t, vs[i-1], vs[i], "id %s sent once at each version", id)
		}
	}
}

// carrying returns a pipeline of batches of 10 and its run after a first
// poll of n new rows, the poll whose answered batch the run carries.
func carrying(t *testing.T, n int) (*pipelineBundle, *run) {
	t.Helper()
	b := setupPipeline(t, Config{BatchSize: 10})
	r := b.run(t)
	b.insert(t, n)
	_, err := b.poll(t, r)
	require.NoError(t, err)
	return b, r
}

// A poll's answered batch stays recorded and unmarked; the next poll reads
// past its items at their versions (a row changed meanwhile goes again,
// at its new version), writes its outcomes with its own record, and the
// job's end writes the last.
func TestCarriedOutcomesGoWithTheNextLook(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupPipeline(t, Config{BatchSize: 10})
	r := b.run(t)
	b.insert(t, 3)

	res, err := b.poll(t, r)
	require.NoError(t, err)
	require.Equal(t, 3, res.rows, "rows answered count, written or carried")
	calls, _, _, _ := b.pusher.snapshot()
	require.Len(t, calls, 1)
	require.Len(t, r.carried.batches, 1, "the answered batch is carried")
	require.Zero(t, b.count(t, "synced_at IS NOT NULL"), "its outcomes are not written yet")
	recs := b.recorded(t)
	require.Len(t, recs, 1, "and it stays recorded: a crash now resends it under its key")
	require.Equal(t, calls[0].Key, recs[0].Key)

	// Two new rows, and one of the carried rows changed.
	b.insert(t, 2)
	var changed int64
	require.NoError(t, b.pool.QueryRow(ctx, `UPDATE resources SET payload = '{"changed": true}'
		WHERE id = (SELECT min(id) FROM resources) RETURNING id`).Scan(&changed))

	res, err = b.poll(t, r)
	require.NoError(t, err)
	require.Equal(t, 3, res.rows, "the carried rows are not counted again")
	calls, _, overlaps, unrecorded := b.pusher.snapshot()
	require.Zero(t, overlaps)
	require.Zero(t, unrecorded, "the second batch was recorded before its push")
	require.Len(t, calls, 2)
	var ids []string
	for _, it := range calls[1].Items {
		ids = append(ids, it.ID)
	}
	require.Len(t, ids, 3, "the new rows and the changed one; not the carried rows unchanged")
	require.Contains(t, ids, strconv.FormatInt(changed, 10))
	require.Equal(t, 2, b.count(t, "synced_at IS NOT NULL"),
		"the first batch's outcomes are written; its changed row stays pending at its new version")
	recs = b.recorded(t)
	require.Len(t, recs, 1, "the first batch's record is forgotten, the second's kept")
	require.Equal(t, calls[1].Key, recs[0].Key)

	require.NoError(t, b.e.flushCarried(ctx, r))
	require.Empty(t, r.carried.batches)
	require.Equal(t, 5, b.count(t, "synced_at IS NOT NULL"), "the job's end writes the last outcomes")
	require.Empty(t, b.recorded(t))
	b.sentOnceEach(t)
}

// A job that dies with a batch carried leaves it recorded: the next holder
// resends it under its key, with its body, and marks it.
func TestCarriedBatchIsResentAfterACrash(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b, r := carrying(t, 4)
	require.Len(t, r.carried.batches, 1)
	first, _, _, _ := b.pusher.snapshot()

	// The job is gone without its end: nothing wrote the outcomes.
	require.NoError(t, b.e.resume(ctx, b.lk, b.rows(), b.src.owns))
	calls, _, _, _ := b.pusher.snapshot()
	require.Len(t, calls, 2)
	require.Equal(t, first[0].Key, calls[1].Key, "resent under its key")
	require.Equal(t, first[0].Body, calls[1].Body, "with its body")
	require.Equal(t, 4, b.count(t, "synced_at IS NOT NULL"))
	require.Empty(t, b.recorded(t))
}

// A pass of another feed (a replay's chunk) writes the carried outcomes
// first: they never wait behind another feed's reads.
func TestCarriedOutcomesBeforeAnotherFeed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b, r := carrying(t, 2)
	require.Len(t, r.carried.batches, 1)

	other := target{feed: b.e.replayFeed(1, resources.Filter{}, b.e.limits(0)), dest: b.pusher, destName: "default"}
	_, ok, err := b.e.turnPass(ctx, r, other, feed.Start, 1, time.Time{}, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, r.carried.batches)
	require.Equal(t, 2, b.count(t, "synced_at IS NOT NULL"))
}

// A poll that finds more than a page goes through the pipeline from the
// page it read: every row once, the last batch carried.
func TestPollOfManyPagesCarriesItsLastBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b, r := carrying(t, 3)
	b.insert(t, 25)

	res, err := b.poll(t, r)
	require.NoError(t, err)
	require.Equal(t, 25, res.rows)
	require.True(t, res.done)
	calls, _, overlaps, unrecorded := b.pusher.snapshot()
	require.Zero(t, overlaps)
	require.Zero(t, unrecorded)
	require.Len(t, calls, 4, "the first look's batch, then 25 rows in three")
	require.NotEmpty(t, r.carried.batches)
	require.NoError(t, b.e.flushCarried(ctx, r))
	require.Equal(t, 28, b.count(t, "synced_at IS NOT NULL"))
	require.Empty(t, b.recorded(t))
	b.sentOnceEach(t)
}

// A look whose batch is recorded as the daemon stops sends nothing: the
// record is forgotten, and the carried outcomes are written.
func TestLookStoppingAfterItsRecordSendsNothing(t *testing.T) {
	t.Parallel()
	b, r := carrying(t, 2)
	b.insert(t, 2)

	b.e.Shutdown()
	_, err := b.poll(t, r)
	require.ErrorIs(t, err, errStopping)
	calls, _, _, _ := b.pusher.snapshot()
	require.Len(t, calls, 1, "nothing sent after the stop")
	require.Equal(t, 2, b.count(t, "synced_at IS NOT NULL"), "the carried outcomes went with the record")
	require.Empty(t, b.recorded(t), "the unsent record is forgotten")
	require.Empty(t, r.carried.batches)
}
