package migrations_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/migrations"
)

// Migration 015 copies every source replay's range and cursor from
// syncer_source_replays into its row of syncer_replays, where this
// release reads them; the old table stays for the previous release's
// daemons, and a replay its CLI creates there meanwhile keeps its range.
func TestOneReplaysTableCopiesSourceReplays(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// The schema as the previous release left it, with its rows: a
	// replay of resources, a ranged source replay halfway through, and a
	// whole-table one not started.
	pool, _ := migratedTo(t, 14)
	since := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var ofResources, ranged, whole int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO syncer_replays (from_id, to_id, since, total_rows)
		VALUES (1, 9, $1, 9) RETURNING id`, since).Scan(&ofResources))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO syncer_replays (source, total_rows, state)
		VALUES ('orders', 40, 'running') RETURNING id`).Scan(&ranged))
	_, err := pool.Exec(ctx, `INSERT INTO syncer_source_replays (replay_id, from_key, to_key, since, changed_column, after_key, keys_logged, last_seq)
		VALUES ($1, '100', '200', $2, 'updated_at', '150', 51, 777)`, ranged, since)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO syncer_replays (source, total_rows) VALUES ('tags', 3) RETURNING id`).Scan(&whole))
	_, err = pool.Exec(ctx, `INSERT INTO syncer_source_replays (replay_id) VALUES ($1)`, whole)
	require.NoError(t, err)

	res, err := migrations.Up(ctx, pool, nil)
	require.NoError(t, err)
	require.NotEmpty(t, res.Applied)
	require.Equal(t, 15, res.Applied[0].Version)

	progress, err := replays.SourcesProgress(ctx, pool)
	require.NoError(t, err)
	require.Len(t, progress, 2)
	got := progress[0]
	require.Equal(t, ranged, got.ID)
	require.Equal(t, "orders", got.Source)
	require.Equal(t, "100", got.Range.FromKey)
	require.Equal(t, "200", got.Range.ToKey)
	require.True(t, since.Equal(got.Range.Since))
	require.True(t, got.Range.Until.IsZero())
	require.Equal(t, "updated_at", got.Range.ChangedColumn)
	require.Equal(t, int64(51), got.KeysLogged)
	require.Equal(t, int64(777), got.LastSeq)
	require.Equal(t, replays.SourceProgress{ID: whole, Source: "tags"}, progress[1])

	cursor := func(id int64) replays.SourceCursor {
		t.Helper()
		var c replays.SourceCursor
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			c, err = replays.LockSourceCursor(ctx, tx, id)
			return err
		}))
		return c
	}
	c := cursor(ranged)
	require.NotNil(t, c.AfterKey)
	require.Equal(t, "150", *c.AfterKey, "the next chunk starts where the previous release stopped")
	require.Nil(t, cursor(whole).AfterKey)

	// The replay of resources is as it was.
	r, err := replays.Load(ctx, pool, ofResources)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Filter.FromID)
	require.True(t, since.Equal(r.Filter.Since))

	// A daemon of the previous release still running moves the old
	// cursor only: this release does not read it.
	_, err = pool.Exec(ctx, `UPDATE syncer_source_replays SET after_key = '180', keys_logged = 81 WHERE replay_id = $1`, ranged)
	require.NoError(t, err)
	require.Equal(t, "150", *cursor(ranged).AfterKey)

	// The previous release's CLI creating a source replay after the
	// migration: its range, written to the old table, is copied.
	var late int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO syncer_replays (source, total_rows) VALUES ('orders', 5) RETURNING id`).Scan(&late); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO syncer_source_replays (replay_id, from_key, to_key, since, until, changed_column)
			VALUES ($1, '7', '11', NULL, $2, 'updated_at')`, late, since)
		return err
	}))
	c = cursor(late)
	require.Equal(t, replays.SourceRange{FromKey: "7", ToKey: "11", Until: c.Range.Until, ChangedColumn: "updated_at"}, c.Range)
	require.True(t, since.Equal(c.Range.Until))
	require.Nil(t, c.AfterKey)
}
