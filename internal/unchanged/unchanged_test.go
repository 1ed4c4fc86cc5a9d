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
// the payload, the tombstone and the tag; the digests kept answer Same per
// feed and key, are replaced and dropped in the marking transaction, and
// forgotten by feed; skips are counted per feed.
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

	settle := func(name string, keep map[string][]byte, drop []string, skipped int) {
		t.Helper()
		b := &pgx.Batch{}
		unchanged.QueueSettled(b, name, "", keep, drop)
		unchanged.QueueSkipped(b, name, skipped)
		require.NoError(t, pool.SendBatch(ctx, b).Close())
	}
	settle("orders", map[string][]byte{"1": d(item("1", 1, `{"a":1}`)), "2": d(item("2", 1, ""))}, nil, 0)
	settle("customers", map[string][]byte{"1": d(item("1", 1, `{"a":2}`))}, nil, 2)

	same, err := unchanged.Same(ctx, pool, "orders", "", []string{"1", "2", "3"},
		[][]byte{d(item("1", 5, `{"a":1}`)), d(item("2", 5, "")), d(item("3", 5, `{}`))})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"1": true, "2": true}, same)
	same, err = unchanged.Same(ctx, pool, "orders", "", []string{"1"}, [][]byte{d(item("1", 5, `{"a":2}`))})
	require.NoError(t, err)
	require.Empty(t, same, "another body")

	settle("orders", map[string][]byte{"1": d(item("1", 6, `{"a":2}`))}, []string{"2"}, 3)
	same, err = unchanged.Same(ctx, pool, "orders", "", []string{"1", "2"}, [][]byte{d(item("1", 7, `{"a":2}`)), d(item("2", 5, ""))})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"1": true}, same, "replaced, and dropped")

	require.NoError(t, unchanged.Forget(ctx, pool, "orders"))
	same, err = unchanged.Same(ctx, pool, "orders", "", []string{"1"}, [][]byte{d(item("1", 7, `{"a":2}`))})
	require.NoError(t, err)
	require.Empty(t, same)
	same, err = unchanged.Same(ctx, pool, "customers", "", []string{"1"}, [][]byte{d(item("1", 7, `{"a":2}`))})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"1": true}, same, "another feed's digests stay")

	counts, err := unchanged.Count(ctx, pool)
	require.NoError(t, err)
	require.EqualValues(t, 3, counts["orders"].Skipped)
	require.EqualValues(t, 2, counts["customers"].Skipped)
}
