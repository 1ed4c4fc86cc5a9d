package resources

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// GaugeCountCap bounds what one Gauges call counts of each kind: beyond it
// the count is the pending index's own estimate, so a backlog of 10^8 rows
// does not make every daemon count 10^8 index entries every few seconds.
const GaugeCountCap = 1_000_000

// GaugeOldestScan is how many of the first pending ids the oldest pending
// age is taken from. Counting reads only the pending index (an index-only
// scan), but the age needs each row: over a backlog of 200,000 rows that
// took ~130 ms of the server's time every refresh, per daemon, while the
// daemon drained. The oldest pending version is among the first ids unless
// rows far behind them were updated since.
const GaugeOldestScan = 10_000

// GaugeCounts are the figures the daemon's gauges show.
type GaugeCounts struct {
	// Pending and Failed are rows whose current version is waiting to be
	// sent, or was rejected; TombstonesPending and TombstonesFailed the same
	// for tombstones. Exact up to GaugeCountCap.
	Pending, Failed                     int64
	TombstonesPending, TombstonesFailed int64
	// Total is PostgreSQL's running count of live rows
	// (pg_stat_user_tables.n_live_tup): maintained by the server, not
	// counted, so it may lag by a few seconds.
	Total int64
	// OldestPendingAge is the age of the oldest pending version among the
	// first GaugeOldestScan pending ids.
	OldestPendingAge time.Duration
}

// Gauges returns the figures of the periodic gauges at a cost that does not
// grow with the table: pending and failed come from the partial indexes,
// which hold only those rows, and the total from the server's statistics.
// Sequential scans are ruled out for the transaction: with most rows
// pending the planner would rather read the whole table.
func Gauges(ctx context.Context, db database.DB) (GaugeCounts, error) {
	var g GaugeCounts
	var age float64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `WITH p AS (
				SELECT (SELECT count(*) FROM (SELECT id FROM resources
					WHERE synced_at IS NULL AND failed_at IS NULL LIMIT $1) x) AS n,
				(SELECT min(changed_at) FROM (SELECT changed_at FROM resources
					WHERE synced_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT $2) x) AS oldest),
			tp AS (
				SELECT (SELECT count(*) FROM (SELECT id FROM syncer_tombstones
					WHERE synced_at IS NULL AND failed_at IS NULL LIMIT $1) x) AS n,
				(SELECT min(deleted_at) FROM (SELECT deleted_at FROM syncer_tombstones
					WHERE synced_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT $2) x) AS oldest)
			SELECT
				greatest(p.n, CASE WHEN p.n >= $1 THEN (SELECT reltuples::bigint FROM pg_class WHERE oid = 'resources_pending_idx'::regclass) ELSE 0 END),
				(SELECT count(*) FROM (SELECT 1 FROM resources WHERE failed_at IS NOT NULL LIMIT $1) x),
				tp.n,
				(SELECT count(*) FROM (SELECT 1 FROM syncer_tombstones WHERE failed_at IS NOT NULL LIMIT $1) x),
				COALESCE((SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'resources'::regclass), 0),
				COALESCE(EXTRACT(EPOCH FROM now() - least(p.oldest, tp.oldest)), 0)::float8
			FROM p, tp`, GaugeCountCap, GaugeOldestScan).Scan(&g.Pending, &g.Failed, &g.TombstonesPending, &g.TombstonesFailed, &g.Total, &age)
	})
	if err != nil {
		return g, fmt.Errorf("resources: gauges: %w", err)
	}
	g.OldestPendingAge = time.Duration(age * float64(time.Second))
	return g, nil
}
