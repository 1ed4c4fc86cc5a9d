package resources

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// What status, the console and the metrics read of the table: counts
// and recent failures, not batches.

// AnyPending reports whether a pending row or tombstone exists. It only
// touches the pending indexes, so it is cheap enough to poll.
//
// The first pending id, not EXISTS: PostgreSQL drops an EXISTS
// subquery's ORDER BY, and with statistics from before a drain (every
// row pending) it then plans a sequential scan that "stops at the first
// row", which in and after a drain reads every marked row before it: a
// table's worth of pages each poll (the relay's, every 2 s; 50-250 ms at
// 50,000 rows on loaded cores). The ordered read takes the pending index,
// whose first scan marks the marks' dead entries killed, so the next
// polls skip them without a visit to the table (docs/benchmarks.md, "The
// relay's look at the pending index").
func AnyPending(ctx context.Context, q database.Querier) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT (SELECT id FROM resources WHERE synced_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT 1) IS NOT NULL
		OR (SELECT id FROM syncer_tombstones WHERE synced_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT 1) IS NOT NULL`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("resources: any pending: %w", err)
	}
	return ok, nil
}

// Counts summarises the table for status.
type Counts struct {
	// Total is the rows in the table; Synced those whose current version
	// the third party accepted.
	Total, Synced int64
	// Unsynced is every row and tombstone not synced, pending or failed;
	// Failed those whose current version was rejected.
	Unsynced, Failed int64
	// TombstonesPending and TombstonesFailed are the tombstones among
	// Unsynced and Failed.
	TombstonesPending, TombstonesFailed int64
	// OldestUnsyncedAge is the age of the oldest pending version, from the
	// change (or delete) that made it.
	OldestUnsyncedAge time.Duration
}

// CountAll returns exact counts. It reads the whole table: it is for
// `syncer status`, not for anything periodic (see Gauges).
func CountAll(ctx context.Context, q database.Querier) (Counts, error) {
	var c Counts
	var age float64
	err := q.QueryRow(ctx, `WITH r AS (SELECT count(*) AS total,
			count(*) FILTER (WHERE synced_at IS NULL) AS unsynced,
			count(*) FILTER (WHERE synced_at IS NOT NULL) AS synced,
			count(*) FILTER (WHERE failed_at IS NOT NULL) AS failed,
			min(changed_at) FILTER (WHERE synced_at IS NULL AND failed_at IS NULL) AS oldest
		FROM resources),
		t AS (SELECT count(*) FILTER (WHERE synced_at IS NULL) AS unsynced,
			count(*) FILTER (WHERE synced_at IS NULL AND failed_at IS NULL) AS pending,
			count(*) FILTER (WHERE failed_at IS NOT NULL) AS failed,
			min(deleted_at) FILTER (WHERE synced_at IS NULL AND failed_at IS NULL) AS oldest
		FROM syncer_tombstones)
		SELECT r.total, r.unsynced + t.unsynced, r.synced, r.failed + t.failed, t.pending, t.failed,
			COALESCE(EXTRACT(EPOCH FROM now() - least(r.oldest, t.oldest)), 0)::float8
		FROM r, t`).Scan(&c.Total, &c.Unsynced, &c.Synced, &c.Failed, &c.TombstonesPending, &c.TombstonesFailed, &age)
	if err != nil {
		return c, fmt.Errorf("resources: counts: %w", err)
	}
	c.OldestUnsyncedAge = time.Duration(age * float64(time.Second))
	return c, nil
}

// Failure is one failed row or tombstone, for status.
type Failure struct {
	ID       int64
	Version  int64
	FailedAt time.Time
	Error    string
}

// RecentFailures returns the most recently failed rows and tombstones.
func RecentFailures(ctx context.Context, q database.Querier, limit int) ([]Failure, error) {
	rows, err := q.Query(ctx, `(SELECT id, version, failed_at, COALESCE(sync_error, '') FROM resources
			WHERE failed_at IS NOT NULL ORDER BY failed_at DESC, id DESC LIMIT $1)
		UNION ALL
		(SELECT id, version, failed_at, COALESCE(sync_error, '') FROM syncer_tombstones
			WHERE failed_at IS NOT NULL ORDER BY failed_at DESC, id DESC LIMIT $1)
		ORDER BY 3 DESC, 1 DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("resources: failures: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Failure, error) {
		var f Failure
		err := r.Scan(&f.ID, &f.Version, &f.FailedAt, &f.Error)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("resources: failures: %w", err)
	}
	return out, nil
}
