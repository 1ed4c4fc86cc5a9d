package resources_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/resources"
)

// captured checks that each row comes with its capture time, the time
// its table holds for it (a row's changed_at, a tombstone's deleted_at),
// and returns the rows without it, to compare the rest.
func (b *bundle) captured(t *testing.T, rows []resources.Row) []resources.Row {
	t.Helper()
	out := make([]resources.Row, len(rows))
	for i, r := range rows {
		var want time.Time
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT CASE WHEN $2
			THEN (SELECT deleted_at FROM syncer_tombstones WHERE id = $1)
			ELSE (SELECT changed_at FROM resources WHERE id = $1) END`, r.ID, r.Deleted).Scan(&want))
		require.False(t, r.Captured.IsZero(), "row %d", r.ID)
		require.True(t, want.Equal(r.Captured), "row %d: captured %v, its table says %v", r.ID, r.Captured, want)
		r.Captured = time.Time{}
		out[i] = r
	}
	return out
}
