package sources_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/sources"
)

// A source replay logs its range chunk by chunk from the cursor kept in
// its row of syncer_replays, gives way while another chunk holds that
// cursor, and reports its range and progress (Replays).
func TestReplayCursorAcrossChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `CREATE TABLE orders (id int PRIMARY KEY, status text)`)
	b.exec(t, `INSERT INTO orders SELECT g, 's' || g FROM generate_series(1, 30) g`)
	_, srcs := b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	src := srcs["orders"]
	require.NoError(t, b.snapshotAll(t, src))
	b.markSynced(t, src, b.pending(t, src))

	r := sources.ReplayRange{FromKey: "5", ToKey: "16"}
	require.NoError(t, src.CheckRange(&r))
	var id int64
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		id, err = replays.Create(ctx, tx, replays.Request{Source: src.Name, Range: r}, 12)
		return err
	}))
	progress := func() replays.Progress {
		t.Helper()
		p, err := replays.ProgressOfOne(ctx, b.pool, sources.ReplaysUnsent, id)
		require.NoError(t, err)
		return p
	}
	p := progress()
	require.Equal(t, r, p.Range)
	require.Zero(t, p.Queued)
	require.Equal(t, "keys", p.Unit)

	// First chunk: keys 5 to 9.
	done, err := sources.Snapshot(ctx, b.pool, src, 5)
	require.NoError(t, err)
	require.False(t, done)
	require.Equal(t, []string{"5", "6", "7", "8", "9"}, keys(b.pending(t, src)))
	p = progress()
	require.Equal(t, int64(5), p.Queued)
	require.Zero(t, p.Sent, "5 keys logged, none sent")
	st, err := replays.StateOf(ctx, b.pool, id)
	require.NoError(t, err)
	require.Equal(t, replays.StateRunning, st)

	// Another daemon's chunk holds the cursor: this one gives way.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = replays.LockSourceCursor(ctx, tx, id)
	require.NoError(t, err)
	_, err = sources.Snapshot(ctx, b.pool, src, 5)
	require.ErrorIs(t, err, sources.ErrSnapshotBusy)
	require.NoError(t, tx.Rollback(ctx))

	// The rest from the cursor, with a source loaded anew as after a
	// restart: 10 to 16, each key once.
	_, again := b.install(t, "  - table: orders\n    key: id\n    destination: crm\n")
	for done = false; !done; {
		done, err = sources.Snapshot(ctx, b.pool, again["orders"], 5)
		require.NoError(t, err)
	}
	rows := b.pending(t, src)
	require.Equal(t, []string{"5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16"}, keys(rows))
	require.Equal(t, 12, b.count(t, `SELECT count(*) FROM syncer_changes WHERE source = 'orders'`), "each key of the range once")
	st, err = replays.StateOf(ctx, b.pool, id)
	require.NoError(t, err)
	require.Equal(t, replays.StateDone, st)

	b.markSynced(t, src, rows)
	p = progress()
	require.Equal(t, int64(12), p.Queued)
	require.Equal(t, int64(12), p.Sent, "every key sent")
	require.True(t, p.Over)
}
