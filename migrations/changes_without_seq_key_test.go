package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/migrations"
)

// Issue 57, migration 031: the change log loses its primary key on seq
// (one B-tree insert less a captured row) and keeps its changes, its key
// index and seq's identity, which goes on from where it was.
func TestChangesWithoutSeqKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := migratedTo(t, 30)
	_, err := pool.Exec(ctx, `INSERT INTO syncer_changes (source, num, key, deleted) VALUES ('s', 1, '1', false), ('s', 2, '2', false)`)
	require.NoError(t, err)
	indexes := func() []string {
		t.Helper()
		var names []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(indexrelid::regclass::text ORDER BY indexrelid::regclass::text)
			FROM pg_index WHERE indrelid = 'syncer_changes'::regclass`).Scan(&names))
		return names
	}
	require.Contains(t, indexes(), "syncer_changes_pkey")

	_, err = migrations.UpTo(ctx, pool, 31)
	require.NoError(t, err)
	require.Equal(t, []string{"syncer_changes_key_idx", "syncer_changes_lane_idx"}, indexes())

	_, err = pool.Exec(ctx, `INSERT INTO syncer_changes (source, num, key, deleted) VALUES ('s', 1, '1', true)`)
	require.NoError(t, err)
	var seqs []int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(seq ORDER BY seq) FROM syncer_changes WHERE source = 's'`).Scan(&seqs))
	require.Len(t, seqs, 3)
	require.Less(t, seqs[1], seqs[2], "seq goes on increasing")
	_, err = pool.Exec(ctx, `INSERT INTO syncer_changes (seq, source, num, key, deleted) VALUES (1, 's', 1, '1', true)`)
	require.Error(t, err, "seq is still generated always")
}
