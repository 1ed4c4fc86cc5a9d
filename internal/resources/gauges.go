package resources

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// GaugeCountCap bounds what one Gauges call counts of each kind: beyond it
// the count is the pending index's own estimate, so a backlog of 10^8 rows
// does not make every daemon count 10^8 index entries every few seconds.
const GaugeCountCap = 1_000_000

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
	// OldestPendingAge is the age of the oldest pending version, exact up to
	// GaugeCountCap pending rows.
	OldestPendingAge time.Duration
}

// Beginner starts transactions: a pool or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Gauges returns the figures of the periodic gauges at a cost that does not
// grow with the table: pending and failed come from the partial indexes,
// which hold only those rows, and the total from the server's statistics.
// Sequential scans are ruled out for the transaction: with most rows
// pending the planner would rather read the whole table.
func Gauges(ctx context.Context, db Beginner) (GaugeCounts, error) {
	var g GaugeCounts
	var age float64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `WITH p AS (
				SELECT count(*) AS n, min(changed_at) AS oldest FROM (SELECT changed_at FROM resources
				WHERE synced_at IS NULL AND failed_at IS NULL LIMIT $1) x),
			tp AS (
				SELECT count(*) AS n, min(deleted_at) AS oldest FROM (SELECT deleted_at FROM syncer_tombstones
				WHERE synced_at IS NULL AND failed_at IS NULL LIMIT $1) x)
			SELECT
				greatest(p.n, CASE WHEN p.n >= $1 THEN (SELECT reltuples::bigint FROM pg_class WHERE oid = 'resources_pending_idx'::regclass) ELSE 0 END),
				(SELECT count(*) FROM (SELECT 1 FROM resources WHERE failed_at IS NOT NULL LIMIT $1) x),
				tp.n,
				(SELECT count(*) FROM (SELECT 1 FROM syncer_tombstones WHERE failed_at IS NOT NULL LIMIT $1) x),
				COALESCE((SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'resources'::regclass), 0),
				COALESCE(EXTRACT(EPOCH FROM now() - least(p.oldest, tp.oldest)), 0)::float8
			FROM p, tp`, GaugeCountCap).Scan(&g.Pending, &g.Failed, &g.TombstonesPending, &g.TombstonesFailed, &g.Total, &age)
	})
	if err != nil {
		return g, fmt.Errorf("resources: gauges: %w", err)
	}
	g.OldestPendingAge = time.Duration(age * float64(time.Second))
	return g, nil
}
