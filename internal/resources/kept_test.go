package resources_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/resources"
)

// PendingKept returns each row's and tombstone's kept digest with it,
// under the feed name it is given (issue 45: the comparison with the body
// last accepted costs no statement of its own); nil where none is kept;
// the rows and the generation are otherwise Pending's.
func TestPendingKeptReadsTheKeptDigests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"b": 2}'), (3, '{"c": 3}')`)
	b.exec(t, `DELETE FROM resources WHERE id = 3`)
	// Versions 2: a version 1 is its id's first, and has no digest to read
	// (TestPendingKeptLeavesFirstVersionsUnprobed).
	b.exec(t, `UPDATE resources SET payload = payload || '{"v": 2}'`)
	b.exec(t, `INSERT INTO syncer_accepted_bodies (feed, key, digest) VALUES
		('resources', '1', '\x01'), ('resources', '3', '\x03'), ('orders', '2', '\x09')`)

	p, err := resources.PendingKept(ctx, b.pool, resources.Start, lim, nil, "resources")
	require.NoError(t, err)
	plain, err := resources.Pending(ctx, b.pool, resources.Start, lim, nil)
	require.NoError(t, err)
	require.Equal(t, plain.Gen, p.Gen)
	require.Equal(t, plain.End, p.End)
	require.Len(t, p.Rows, 3)
	got := map[int64][]byte{}
	for i, r := range p.Rows {
		got[r.ID] = r.Kept
		r.Kept = nil
		require.Equal(t, plain.Rows[i], r, "otherwise Pending's rows")
	}
	require.Equal(t, map[int64][]byte{1: {1}, 2: nil, 3: {3}}, got)
	require.True(t, p.Rows[2].Deleted, "a tombstone's digest too")

	p, err = resources.PendingKept(ctx, b.pool, 1, lim, nil, "orders")
	require.NoError(t, err)
	require.Len(t, p.Rows, 2)
	require.Equal(t, []byte{9}, p.Rows[0].Kept, "the feed name given")
	require.Nil(t, p.Rows[1].Kept)
}

// A row's version 1 is its id's first, so the read does not probe the kept
// digests for it (issue 55: the probes were half of a drain's read, and
// every one missed): a digest kept under its id anyway, as of an id back
// after its tombstone was purged, is not read, and the row is sent as a
// key with no digest is. Later versions and tombstones are probed.
func TestPendingKeptLeavesFirstVersionsUnprobed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"b": 2}'), (3, '{"c": 3}')`)
	b.exec(t, `UPDATE resources SET payload = '{"b": 3}' WHERE id = 2`)
	b.exec(t, `DELETE FROM resources WHERE id = 3`)
	b.exec(t, `INSERT INTO syncer_accepted_bodies (feed, key, digest) VALUES
		('resources', '1', '\x01'), ('resources', '2', '\x02'), ('resources', '3', '\x03')`)

	p, err := resources.PendingKept(ctx, b.pool, resources.Start, lim, nil, "resources")
	require.NoError(t, err)
	require.Len(t, p.Rows, 3)
	require.Equal(t, int64(1), p.Rows[0].Version)
	require.Nil(t, p.Rows[0].Kept, "version 1: not probed")
	require.Equal(t, []byte{2}, p.Rows[1].Kept, "version 2")
	require.Equal(t, []byte{3}, p.Rows[2].Kept, "a tombstone")
}
