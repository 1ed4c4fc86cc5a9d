package history

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// Tombstone is a key whose newest settled version in the story is a
// tombstone: the key was deleted and the third party answered for its
// delete. `syncer verify` reads these back, since a key deleted here is
// gone from its table once its tombstone was exported (a hard delete) and
// the story is the only place left that names it.
type Tombstone struct {
	Key string
	// Version is the tombstone's version.
	Version int64
	// Outcome is Accepted or Failed.
	Outcome string
}

// tombstonesSQL reads, per key after $2 in byte order, its newest
// tombstone settled (accepted or failed) in either table: $1 the feed, $3
// the limit, $4 the tenant ("" for every one). A request carries its
// tombstones in its deleted array (NULL when it carries none), so only the
// requests with one are unnested, and only their tombstones kept. A
// version above the tombstone that was not one is a row inserted again:
// present in its table, which the caller checks; deleted again, it has a
// newer tombstone.
const tombstonesSQL = `SELECT DISTINCT ON (key) key, version, outcome FROM (
		SELECT h.key COLLATE "C" AS key, h.version, h.outcome, h.at
		FROM syncer_history h
		WHERE h.feed = $1 AND h.deleted AND h.key COLLATE "C" > $2 AND h.outcome IN ('accepted', 'failed')
			AND ($4 = '' OR h.tenant = $4)
		UNION ALL
		SELECT u.key, u.version, 'accepted', r.at
		FROM syncer_history_requests r
			CROSS JOIN LATERAL unnest(r.keys, r.versions, r.deleted) AS u(key, version, deleted)
		WHERE r.feed = $1 AND r.deleted IS NOT NULL AND true = ANY(r.deleted)
			AND u.deleted AND u.key > $2 AND ($4 = '' OR r.tenant = $4)
	) e
	ORDER BY key, version DESC, at DESC
	LIMIT $3`

// Tombstones returns up to limit keys of feed after the key after ("" for
// the first), in byte order, that the story holds a settled tombstone of
// (accepted or rejected), each with its newest; with tenant (not "") only
// that tenant's. last is the last key returned, the cursor of the next
// call, and done is set when there are no more. Whether the key is a row
// again since is the caller's to check.
//
// Each call reads every request that carried a tombstone of the feed:
// callers read a few thousand keys a call, not a page of lookups.
//
// It reads what the retention (Config.Retention, MaxEntries) left, and
// nothing when PostgreSQL crashed since (the tables are unlogged).
func Tombstones(ctx context.Context, q database.Querier, feed, tenant, after string, limit int) (out []Tombstone, last string, done bool, err error) {
	rows, err := q.Query(ctx, tombstonesSQL, feed, after, limit, tenant)
	if err != nil {
		return nil, "", false, fmt.Errorf("history: tombstones of %s: %w", feed, err)
	}
	out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tombstone, error) {
		var t Tombstone
		err := r.Scan(&t.Key, &t.Version, &t.Outcome)
		return t, err
	})
	if err != nil {
		return nil, "", false, fmt.Errorf("history: tombstones of %s: %w", feed, err)
	}
	last = after
	if len(out) > 0 {
		last = out[len(out)-1].Key
	}
	return out, last, len(out) < limit, nil
}
