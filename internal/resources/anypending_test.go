package resources_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/resources"
)

// seqScansOf returns a function reading how many sequential scans of
// table conn's session and the others made, its own counters flushed first.
func (b *bundle) seqScansOf(t *testing.T, conn *pgx.Conn, table string) func() int64 {
	ctx := context.Background()
	return func() int64 {
		t.Helper()
		// A session's counters reach the shared statistics when it goes
		// idle after asking for a flush.
		_, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.Eventually(t, func() bool {
			_, err := b.pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
			require.NoError(t, err)
			return b.pool.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).Scan(&n) == nil
		}, 5*time.Second, 50*time.Millisecond)
		return n
	}
}

// In and after a drain the statistics still say every row is pending
// (they were taken before it), and an EXISTS over the pending rows was
// planned as a sequential scan that read every marked row: a table's
// worth of pages at each of the relay's polls.
func TestAnyPendingReadsThePendingIndexWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 20000) g`)
	b.exec(t, `ANALYZE resources`)
	b.exec(t, `ANALYZE syncer_tombstones`)

	// Every statement on one session, so the scans counted are its own.
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	exec := func(sql string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	anyPending := func() bool {
		t.Helper()
		pending, err := resources.AnyPending(ctx, conn.Conn())
		require.NoError(t, err)
		return pending
	}
	seqScans := b.seqScansOf(t, conn.Conn(), "resources")

	// The drain: every row marked but the last, with no analyze since.
	exec(`UPDATE resources SET synced_at = now() WHERE id < 20000`)
	before := seqScans()
	require.True(t, anyPending(), "the last row is pending")
	require.Equal(t, before, seqScans(), "no sequential scan of resources")

	exec(`UPDATE resources SET synced_at = now() WHERE id = 20000`)
	before = seqScans()
	require.False(t, anyPending())
	require.Equal(t, before, seqScans(), "no sequential scan of resources")

	exec(`DELETE FROM resources WHERE id = 1`)
	require.True(t, anyPending(), "a tombstone is pending")
}
