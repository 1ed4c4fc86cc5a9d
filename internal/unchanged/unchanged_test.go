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

// A digest is the body under the destination's tag: not the version, but
// the payload, the tombstone and the tag; the digests kept are read per
// feed and key (KeptSQL), inserted (fresh, giving way to an upsert when
// one is there already), upserted and dropped in the marking transaction,
// and forgotten by feed; skips are counted per feed.
func TestDigestsKeptComparedAndForgotten(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.NewMigrated(t).Pool
	item := func(id string, v int64, payload string) feed.Item {
		return feed.Item{ID: id, Version: v, Payload: json.RawMessage(payload), Deleted: payload == ""}
	}
	d := func(it feed.Item) []byte { return unchanged.Digest("tag", it) }
	require.Equal(t, d(item("1", 1, `{"a":1}`)), d(item("1", 9, `{"a":1}`)), "the version is not in it")
	require.NotEqual(t, d(item("1", 1, `{"a":1}`)), d(item("1", 1, `{"a":2}`)))
	require.NotEqual(t, d(item("1", 1, `{"a":1}`)), unchanged.Digest("other", item("1", 1, `{"a":1}`)), "the tag is in it")
	require.NotEqual(t, d(item("1", 1, "")), d(item("1", 1, `null`)), "a tombstone is not a null payload")

	settle := func(name string, keep, fresh map[string][]byte, drop []string, skipped int) {
		t.Helper()
		b := &pgx.Batch{}
		unchanged.QueueSettled(b, name, "", keep, fresh, drop)
		unchanged.QueueSkipped(b, name, skipped)
		require.NoError(t, pool.SendBatch(ctx, b).Close())
	}
	settle("orders", nil, map[string][]byte{"1": d(item("1", 1, `{"a":1}`)), "2": d(item("2", 1, ""))}, nil, 0)
	settle("customers", map[string][]byte{"1": d(item("1", 1, `{"a":2}`))}, nil, nil, 2)

	// What a read returns with each key (unchanged.KeptSQL).
	kept := func(name string, ids ...string) map[string][]byte {
		t.Helper()
		out := map[string][]byte{}
		for _, id := range ids {
			var d []byte
			require.NoError(t, pool.QueryRow(ctx, `SELECT `+unchanged.KeptSQL("$1::text", "''", "$2::text"), name, id).Scan(&d))
			if d != nil {
				out[id] = d
			}
		}
		return out
	}
	require.Equal(t, map[string][]byte{"1": d(item("1", 5, `{"a":1}`)), "2": d(item("2", 5, ""))}, kept("orders", "1", "2", "3"))

	// Key 1 written as fresh although it has a digest (one came since
	// its read): the insert gives way to the upsert, key 3 with it.
	settle("orders", nil, map[string][]byte{"1": d(item("1", 6, `{"a":2}`)), "3": d(item("3", 1, `{}`))}, []string{"2"}, 3)
	require.Equal(t, map[string][]byte{"1": d(item("1", 7, `{"a":2}`)), "3": d(item("3", 1, `{}`))}, kept("orders", "1", "2", "3"), "replaced, added, and dropped")
	settle("orders", map[string][]byte{"3": d(item("3", 2, `{"c":3}`)), "4": d(item("4", 1, `{}`))}, nil, nil, 0)
	require.Equal(t, map[string][]byte{"3": d(item("3", 2, `{"c":3}`)), "4": d(item("4", 1, `{}`))}, kept("orders", "3", "4"), "upserted")

	require.NoError(t, unchanged.Forget(ctx, pool, "orders"))
	require.Empty(t, kept("orders", "1"))
	require.Equal(t, map[string][]byte{"1": d(item("1", 7, `{"a":2}`))}, kept("customers", "1"), "another feed's digests stay")

	counts, err := unchanged.Count(ctx, pool)
	require.NoError(t, err)
	require.EqualValues(t, 3, counts["orders"].Skipped)
	require.EqualValues(t, 2, counts["customers"].Skipped)
}
