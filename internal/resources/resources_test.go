package resources_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/migrations"
)

func TestPendingPassesPayloadsThroughAndMarksExactVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := migrations.Up(ctx, pool, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO resources (payload) VALUES ('{"a": "é", "b": [1, 2.5, null]}'), ('"plain"'), ('{"big": "`+string(make([]byte, 0))+`x"}')`)
	require.NoError(t, err)

	rows, gen, err := resources.Pending(ctx, pool, 0, resources.Limits{Rows: 10}, nil)
	require.NoError(t, err)
	require.Zero(t, gen)
	require.Len(t, rows, 3)
	for _, r := range rows {
		var want string
		require.NoError(t, pool.QueryRow(ctx, `SELECT payload::text FROM resources WHERE id = $1`, r.ID).Scan(&want))
		require.Equal(t, want, string(r.Payload))
	}

	// A byte limit cuts the batch but never below one row.
	small, _, err := resources.Pending(ctx, pool, 0, resources.Limits{Rows: 10, Bytes: 1}, nil)
	require.NoError(t, err)
	require.Len(t, small, 1)

	// Row 1 changes while "in flight": its mark must not apply.
	_, err = pool.Exec(ctx, `UPDATE resources SET payload = '{"a": 2}' WHERE id = $1`, rows[0].ID)
	require.NoError(t, err)
	var v resources.Versions
	for _, r := range rows {
		v.Add(r.ID, r.Version)
	}
	n, err := resources.MarkSynced(ctx, pool, v)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	left, _, err := resources.Pending(ctx, pool, 0, resources.Limits{Rows: 10}, nil)
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, rows[0].ID, left[0].ID)
	require.Equal(t, int64(2), left[0].Version)
}
