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

// tombstonesSQL reads, per key after $2 in byte order, its newest settled
// version among the entries of both tables that hold a tombstone, and
// keeps it when it is one: $1 the feed, $3 the limit, $4 the tenant (""
// for every one). A request carries its tombstones in its deleted array
// (NULL when it carries none), so only the requests with one are
// unnested. A key's entries of versions above the tombstone that were
// not tombstones are those of a row inserted again: present in the table,
// which the caller checks.
const tombstonesSQL = `SELECT key, version, deleted, outcome FROM (
		SELECT DISTINCT ON (key) key, version, deleted, outcome FROM (
			SELECT h.key COLLATE "C" AS key, h.version, coalesce(h.deleted, false) AS deleted, h.outcome, h.at
			FROM syncer_history h
			WHERE h.feed = $1 AND h.key COLLATE "C" > $2 AND h.outcome IN ('accepted', 'failed')
				AND ($4 = '' OR h.tenant = $4)
			UNION ALL
			SELECT u.key, u.version, coalesce(u.deleted, false), 'accepted', r.at
			FROM syncer_history_requests r
				CROSS JOIN LATERAL unnest(r.keys, r.versions, r.deleted) AS u(key, version, deleted)
			WHERE r.feed = $1 AND r.deleted IS NOT NULL AND true = ANY(r.deleted)
				AND u.key > $2 AND ($4 = '' OR r.tenant = $4)
		) e
		ORDER BY key, version DESC, at DESC
	) k
	ORDER BY key LIMIT $3`

// Tombstones returns up to limit keys of feed after the key after ("" for
// the first), in byte order, whose newest version the story holds settled
// is a tombstone, accepted or rejected; with tenant (not "") only that
// tenant's. Keys of more than limit are read, and as many returned as
// there are such keys among the first limit keys with a tombstone; last is
// the last key read, the cursor of the next call, and done is set when
// there are no more.
//
// It reads what the retention (Config.Retention, MaxEntries) left, and
// nothing when PostgreSQL crashed since (the tables are unlogged).
func Tombstones(ctx context.Context, q database.Querier, feed, tenant, after string, limit int) (out []Tombstone, last string, done bool, err error) {
	rows, err := q.Query(ctx, tombstonesSQL, feed, after, limit, tenant)
	if err != nil {
		return nil, "", false, fmt.Errorf("history: tombstones of %s: %w", feed, err)
	}
	type row struct {
		key     string
		version int64
		deleted bool
		outcome string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.key, &x.version, &x.deleted, &x.outcome)
		return x, err
	})
	if err != nil {
		return nil, "", false, fmt.Errorf("history: tombstones of %s: %w", feed, err)
	}
	last = after
	for _, x := range got {
		last = x.key
		if x.deleted {
			out = append(out, Tombstone{Key: x.key, Version: x.version, Outcome: x.outcome})
		}
	}
	return out, last, len(got) < limit, nil
}
