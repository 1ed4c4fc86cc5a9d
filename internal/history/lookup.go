package history

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// LookupLimitDefault is the most entries Lookup reads of one key: the
// newest ones.
const LookupLimitDefault = 1000

// Entry is one event of a version's story.
type Entry struct {
	At          time.Time  `json:"at"`
	BatchedAt   *time.Time `json:"batched_at,omitempty"`
	BatchKey    string     `json:"idempotency_key,omitempty"`
	Destination string     `json:"destination,omitempty"`
	Tenant      string     `json:"tenant,omitempty"`
	// Status is the answer's HTTP status; nil for an entry without a
	// request, 0 when no answer came.
	Status    *int   `json:"status,omitempty"`
	LatencyMS *int   `json:"latency_ms,omitempty"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
}

// Version is one exported version of a key and its entries, oldest first.
type Version struct {
	Version int64 `json:"version"`
	Deleted bool  `json:"deleted,omitempty"`
	// Captured is when the version was captured: the start of the
	// transaction that wrote it (feed.Item.Captured); nil when its read
	// did not say (a batch resent from its record after a crash).
	Captured *time.Time `json:"captured_at,omitempty"`
	// Settled is how the version ended: Accepted, Failed, Skipped;
	// Superseded when a newer version followed before it was settled
	// (a failure the row's next change replaced, a deferral, a retry
	// cut short); Pending while the newest is unsettled.
	Settled string  `json:"settled"`
	Entries []Entry `json:"entries"`
}

// Story is what history holds of one key, its versions oldest first.
type Story struct {
	Feed     string    `json:"source"`
	Key      string    `json:"key"`
	Versions []Version `json:"versions"`
	// Truncated is set when the key had more entries than were read: the
	// oldest are left out.
	Truncated bool `json:"truncated,omitempty"`
}

// lookupSQL reads a key's entries from both tables: its own, through the
// (feed, key) btree, and the requests that carried it: the indexed ones
// through the GIN index of their keys, the others (written since the
// Pruner last indexed) through the index of the unindexed rows, their
// arrays looked at. The key's place in a request's arrays is found by
// array_position (a key is once in a request).
const lookupSQL = `SELECT version, deleted, at, batched_at, batch_key, destination, tenant, status, latency_ms, outcome, reason, captured
	FROM (
		SELECT version, coalesce(deleted, false) AS deleted, at, batched_at, coalesce(batch_key, '') AS batch_key,
			coalesce(destination, '') AS destination, coalesce(tenant, '') AS tenant, status, latency_ms, outcome,
			coalesce(reason, '') AS reason, captured_at AS captured
		FROM syncer_history WHERE feed = $1 AND key = $2
		UNION ALL
		SELECT r.versions[p.i], coalesce(r.deleted[p.i], false), r.at, r.batched_at, r.batch_key,
			coalesce(r.destination, ''), coalesce(r.tenant, ''), r.status, r.latency_ms, 'accepted', '', r.captured[p.i]
		FROM (
			SELECT * FROM syncer_history_requests WHERE indexed AND keys @> ARRAY[$2::text COLLATE "C"]
			UNION ALL
			SELECT * FROM syncer_history_requests WHERE NOT indexed AND keys @> ARRAY[$2::text COLLATE "C"]
		) r CROSS JOIN LATERAL (SELECT array_position(r.keys, $2::text COLLATE "C") AS i) p
		WHERE r.feed = $1
	) e
	ORDER BY at DESC LIMIT $3`

// Lookup reads the story of feed's key: its newest limit entries (0:
// LookupLimitDefault), through the indexes of its key.
//
// It reads in a transaction of its own (a savepoint in db's, when db is
// one) with sequential scans off: the planner does not count the
// detoasting of every request's keys against a scan of the table, and
// chose one (300 ms against 16 ms) while half a million keys waited for
// the index.
func Lookup(ctx context.Context, db database.DB, feed, key string, limit int) (Story, error) {
	if limit <= 0 {
		limit = LookupLimitDefault
	}
	st := Story{Feed: feed, Key: key, Versions: []Version{}}
	tx, err := db.Begin(ctx)
	if err != nil {
		return st, fmt.Errorf("history: look up %s %s: %w", feed, key, err)
	}
	// Read only: a rollback ends it as well as a commit would.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		return st, fmt.Errorf("history: look up %s %s: %w", feed, key, err)
	}
	rows, err := tx.Query(ctx, lookupSQL, feed, key, limit+1)
	if err != nil {
		return st, fmt.Errorf("history: look up %s %s: %w", feed, key, err)
	}
	type row struct {
		version  int64
		deleted  bool
		captured *time.Time
		e        Entry
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		var status *int16
		var latency *int32
		err := r.Scan(&x.version, &x.deleted, &x.e.At, &x.e.BatchedAt, &x.e.BatchKey, &x.e.Destination, &x.e.Tenant,
			&status, &latency, &x.e.Outcome, &x.e.Reason, &x.captured)
		if status != nil {
			s := int(*status)
			x.e.Status = &s
		}
		if latency != nil {
			l := int(*latency)
			x.e.LatencyMS = &l
		}
		return x, err
	})
	if err != nil {
		return st, fmt.Errorf("history: look up %s %s: %w", feed, key, err)
	}
	if len(got) > limit {
		got, st.Truncated = got[:limit], true
	}
	slices.Reverse(got)
	// Versions in order; entries of a version in the order they came.
	byVersion := map[int64]int{}
	for _, x := range got {
		i, ok := byVersion[x.version]
		if !ok {
			i = len(st.Versions)
			byVersion[x.version] = i
			st.Versions = append(st.Versions, Version{Version: x.version, Deleted: x.deleted})
		}
		st.Versions[i].Entries = append(st.Versions[i].Entries, x.e)
		if st.Versions[i].Captured == nil {
			st.Versions[i].Captured = x.captured
		}
	}
	slices.SortStableFunc(st.Versions, func(a, b Version) int {
		switch {
		case a.Version < b.Version:
			return -1
		case a.Version > b.Version:
			return 1
		}
		return 0
	})
	for i := range st.Versions {
		st.Versions[i].Settled = settledOf(st.Versions[i].Entries, i < len(st.Versions)-1)
	}
	return st, nil
}

// settledOf is how a version ended: its last settling entry, or
// superseded when a newer version followed and nothing settled it.
func settledOf(entries []Entry, newer bool) string {
	for i := len(entries) - 1; i >= 0; i-- {
		switch o := entries[i].Outcome; o {
		case Accepted, Skipped, Failed:
			if o == Failed && newer {
				// A failure stands until the row changes: the newer
				// version replaced it.
				return Superseded
			}
			return o
		}
	}
	if newer {
		return Superseded
	}
	return Pending
}
