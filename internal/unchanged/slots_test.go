package unchanged_test

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// Issue 57: a source's digests are found by a bigint, not by three texts
// compared under the database's collation at each step of the index; a
// key whose slot holds another key's digest (a collision of their
// hashes) finds none, and keeping its digest takes the slot over, so a
// collision can only cost a request, never a skip.
func TestDigestsAreFoundByABigintSlot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	var cols []string
	rows, err := pool.Query(ctx, `SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = 'syncer_source_digests'::regclass AND i.indisprimary`)
	require.NoError(t, err)
	cols, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"slot bigint"}, cols)

	d := unchanged.Digest("tag", feed.Item{ID: "a", Payload: json.RawMessage(`{"a":1}`)})
	kept := func(key string) []byte {
		t.Helper()
		var k []byte
		require.NoError(t, pool.QueryRow(ctx, `SELECT `+unchanged.KeptSQL("$1::text", "''", "$2::text"), "orders", key).Scan(&k))
		return k
	}
	// b's digest in a's slot, as if their hashes collided.
	_, err = pool.Exec(ctx, `INSERT INTO syncer_source_digests (slot, feed, tenant, key, digest)
		VALUES (`+unchanged.SlotSQL("'orders'", "'a'")+`, 'orders', '', 'b', $1)`, d)
	require.NoError(t, err)
	require.Nil(t, kept("a"), "another key's digest in the slot is not a's")
	for _, fresh := range []bool{true, false} {
		ds := unchanged.NewDigests(1)
		ds.Add("tag", feed.Item{ID: "a", Payload: json.RawMessage(`{"a":1}`)})
		b := &pgx.Batch{}
		if fresh {
			unchanged.QueueSettledDigests(b, "orders", "", nil, ds, nil)
		} else {
			unchanged.QueueSettledDigests(b, "orders", "", ds, nil, nil)
		}
		require.NoError(t, pool.SendBatch(ctx, b).Close(), "fresh %v", fresh)
		require.Equal(t, d, kept("a"), "fresh %v", fresh)
		_, err = pool.Exec(ctx, `UPDATE syncer_source_digests SET key = 'b'`)
		require.NoError(t, err)
	}
}
