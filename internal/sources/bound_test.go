package sources_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
)

// A row whose payload is larger than the feed's MaxItemBytes comes without
// it, its size measured in the server, as a row of resources does; the rows
// around it come whole, and a batch's bytes never count it.
func TestPendingLeavesOversizeItemsOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE docs (id bigint PRIMARY KEY, body text)`)
	_, srcs := b.install(t, "  - {table: docs, key: id, destination: crm}\n")
	b.exec(t, `INSERT INTO docs VALUES (1, 'small'), (2, repeat('x', 3 << 20)), (3, 'small too')`)
	b.exec(t, `DELETE FROM docs WHERE id = 3`)

	p, err := sources.Pending(context.Background(), b.pool, srcs["docs"], "", true, feed.Limits{Items: 10, Bytes: 1 << 10, MaxItemBytes: 1 << 20}.WithDefaults())
	require.NoError(t, err)
	require.True(t, p.End, "an oversize row takes no room: all three fit")
	rows := p.Rows
	require.Len(t, rows, 3, "the large row takes no room in the batch's bytes")
	require.Equal(t, "1", rows[0].Key)
	require.Zero(t, rows[0].Oversize)
	require.JSONEq(t, `{"id": 1, "body": "small"}`, string(rows[0].Payload))
	require.Equal(t, "2", rows[1].Key)
	require.Greater(t, rows[1].Oversize, int64(3<<20), "its size, measured in the server")
	require.Nil(t, rows[1].Payload, "never read into the daemon")
	require.False(t, rows[1].Deleted)
	require.Equal(t, "3", rows[2].Key)
	require.True(t, rows[2].Deleted, "a tombstone is never oversize")
	require.Zero(t, rows[2].Oversize)

	wp, err := sources.Pending(context.Background(), b.pool, srcs["docs"], "", true, feed.Limits{Items: 10, MaxItemBytes: 8 << 20}.WithDefaults())
	require.NoError(t, err)
	whole := wp.Rows
	require.Len(t, whole, 3)
	require.Zero(t, whole[1].Oversize)
	require.Len(t, whole[1].Payload, len(`{"id": 2, "body": ""}`)+3<<20, "under the bound, the row comes whole")
}
