// Package resources reads and marks rows of the exported table.
//
// It owns every statement that touches resources, so the rules of the
// contract live in one place: a row is pending while its current version is
// neither synced nor failed; a mark only applies to the version that was
// pushed, so a row updated while its batch was in flight stays pending and
// goes again; pending rows are always found by scanning the pending index
// from the start, never by a saved high-water mark, because ids do not commit
// in order.
package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/feed"
)

// Start is the cursor before every id (feed.Start): keyset reads take ids
// after the cursor, and any id a bigint holds, zero and negative ones
// included, is exported. Reads from Start take ids >= Start, so
// math.MinInt64 itself is not lost.
const Start = feed.Start

// Row is one exported row at one version, or the tombstone of a deleted one.
type Row struct {
	ID      int64
	Version int64
	// Payload is the row's jsonb as text; nil for a tombstone and for an
	// oversize row.
	Payload json.RawMessage
	// Deleted marks a tombstone: the row was deleted, and Version is one
	// above its last version.
	Deleted bool
	// Oversize is the payload's size in bytes when it is larger than
	// feed.Limits.MaxItemBytes: the payload was not read, and the row is to be
	// recorded as failed rather than sent. 0 otherwise.
	Oversize int64
	// Kept is the digest of the body the third party last accepted for
	// the row's id (its accepted_digest: KeepDigests), when the read was
	// PendingKept; nil when none is kept.
	Kept []byte
	// Captured is when the version was written: the row's changed_at (the
	// start of the transaction that inserted it or changed its payload),
	// or a tombstone's deleted_at. Read with the rest, for the version's
	// story (feed.Item.Captured).
	Captured time.Time
}

// batchArgs are a batch's byte bound and item bound as the statements take
// them. The limits come whole (feed.Limits.Validate): the exporter's
// Config applied their defaults.
func batchArgs(l feed.Limits) (bytes, maxItem int64) {
	return int64(l.Bytes), int64(l.MaxItemBytes)
}

// The statements that read batches share one shape. candidates are the
// next rows and tombstones after the cursor in id order (a merge of two
// index scans), each with a lower bound of its payload's size that costs no
// read of the payload: pg_column_size, the stored (possibly compressed)
// size. Only candidates whose lower bounds still fit are sized exactly
// (jsonb's stored size when uncompressed, the text's length when
// compressed, which detoasts it in the server), and only those whose exact
// sizes fit, with the first always, are returned; a payload above
// MaxItemBytes is never returned at all. So neither the wire nor this
// process ever carries more than the limit plus one row of the limit's
// size, whatever the rows weigh.
//
// $1 cursor, $2 rows, $3 bytes, $4 max item bytes; %[1]s the rows'
// condition, %[2]s the tombstones', %[3]s extra output columns. cands,
// how many candidates there were, tells the reader whether it saw the end.
// captured is the version's capture time, from the heap tuple each
// candidate is read from anyway.
const batchSQL = `SELECT id, version, deleted, size,
	CASE WHEN NOT deleted AND size <= $4 THEN payload END, cands, captured%[3]s
FROM (
	SELECT c.*,
		sum(CASE WHEN size <= $4 THEN size ELSE 0 END) OVER w AS upto,
		row_number() OVER w AS n
	FROM (
		SELECT b.id, b.version, b.deleted, b.payload, b.cands, b.captured, b.kept,
			CASE WHEN b.deleted THEN 0
			     WHEN pg_column_compression(b.payload) IS NULL THEN b.lower
			     ELSE octet_length(b.payload::text) END AS size
		FROM (
			SELECT a.*, sum(a.lower) OVER (ORDER BY a.id ROWS UNBOUNDED PRECEDING) - a.lower AS before,
				count(*) OVER () AS cands
			FROM (
				(SELECT id, version, false AS deleted, payload, pg_column_size(payload) AS lower, changed_at AS captured,
				        accepted_digest AS kept
				   FROM resources WHERE %[1]s ORDER BY id LIMIT $2)
				UNION ALL
				(SELECT id, version, true, NULL::jsonb, 0, deleted_at, accepted_digest
				   FROM syncer_tombstones WHERE %[2]s ORDER BY id LIMIT $2)
				ORDER BY id LIMIT $2
			) a
		) b
		WHERE b.before < $3
	) c
	WINDOW w AS (ORDER BY id ROWS UNBOUNDED PRECEDING)
) d
WHERE n = 1 OR upto <= $3
ORDER BY id`

// after is the cursor condition: ids after $1, or from Start on. Two
// statements rather than an OR: a generic plan cannot start an index scan
// at "$1 or everything" and would read the pending index from its start.
func after(afterID int64) string {
	if afterID == Start {
		return `id >= $1`
	}
	return `id > $1`
}

const pendingWhere = `synced_at IS NULL AND failed_at IS NULL AND `

const generationColumn = `, (SELECT live FROM syncer_generation)`

// keptColumn is, for PendingKept, each row's and tombstone's
// accepted_digest: read from the tuple the read reads anyway, where it
// was a probe of syncer_accepted_bodies a key (issue 55: the probes were
// half of a drain's read, and the digests' insert 4-5 µs of its marks'
// 11-13 a row; docs/benchmarks.md, "A resources row keeps its accepted
// digest").
const keptColumn = generationColumn + ", d.kept"

// pendingSQL are the pending reads, from Start and after an id, without
// and with (PendingKept) each row's kept digest.
var pendingSQL = [2][2]string{
	{
		fmt.Sprintf(batchSQL, pendingWhere+after(Start), pendingWhere+after(Start), generationColumn),
		fmt.Sprintf(batchSQL, pendingWhere+after(0), pendingWhere+after(0), generationColumn),
	},
	{
		fmt.Sprintf(batchSQL, pendingWhere+after(Start), pendingWhere+after(Start), keptColumn),
		fmt.Sprintf(batchSQL, pendingWhere+after(0), pendingWhere+after(0), keptColumn),
	},
}

func pendingQuery(afterID int64, kept bool) string {
	k := 0
	if kept {
		k = 1
	}
	if afterID == Start {
		return pendingSQL[k][0]
	}
	return pendingSQL[k][1]
}

// Page is one read of pending rows.
type Page struct {
	Rows []Row
	// Gen is the live generation read in the same statement (see
	// RetryFailed).
	Gen int64
	// End is true when no limit left a pending row after the cursor out:
	// the read saw every one there was.
	End bool
}

// Pending returns the next batch of pending rows and tombstones with id >
// afterID (Start for all), merged in id order, and the live generation read
// in the same statement. An id is never both a pending row and a pending
// tombstone. scratch, if non-nil, is reused to spare allocations.
func Pending(ctx context.Context, q database.Querier, afterID int64, lim feed.Limits, scratch []Row) (Page, error) {
	return pending(ctx, q, afterID, lim, scratch, false)
}

// PendingKept is Pending, and each row comes with the digest of the body
// last accepted for its id (Row.Kept, the row's or the tombstone's
// accepted_digest): read in the same statement, not in one more a page
// (docs/benchmarks.md, "No request for an unchanged row").
func PendingKept(ctx context.Context, q database.Querier, afterID int64, lim feed.Limits, scratch []Row) (Page, error) {
	return pending(ctx, q, afterID, lim, scratch, true)
}

func pending(ctx context.Context, q database.Querier, afterID int64, lim feed.Limits, scratch []Row, kept bool) (Page, error) {
	if err := lim.Validate(); err != nil {
		return Page{}, fmt.Errorf("resources: pending: %w", err)
	}
	bytes, maxItem := batchArgs(lim)
	rows, err := q.Query(ctx, pendingQuery(afterID, kept), afterID, lim.Items, bytes, maxItem)
	if err != nil {
		return Page{}, fmt.Errorf("resources: select pending: %w", err)
	}
	var p Page
	p.Rows, p.End, err = collect(rows, lim, scratch[:0], &p.Gen, kept)
	return p, err
}

// Filter selects rows for a replay. Tombstones match it as the rows they
// were: by id, by the deleted row's creation time, and by failure.
type Filter struct {
	FromID, ToID int64     // inclusive; 0 means open
	Since, Until time.Time // on created_at, [Since, Until); zero means open
	FailedOnly   bool
}

func (f Filter) where() string {
	return `($2::bigint = 0 OR id >= $2) AND ($3::bigint = 0 OR id <= $3)
		AND ($4::timestamptz IS NULL OR created_at >= $4)
		AND ($5::timestamptz IS NULL OR created_at < $5)
		AND (NOT $6::boolean OR failed_at IS NOT NULL)`
}

func (f Filter) args() []any {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	return []any{f.FromID, f.ToID, since, until, f.FailedOnly}
}

// Count returns how many rows and tombstones match f.
func Count(ctx context.Context, q database.Querier, f Filter) (int64, error) {
	var n int64
	args := f.args()
	w := strings.NewReplacer("$2", "$1", "$3", "$2", "$4", "$3", "$5", "$4", "$6", "$5").Replace(f.where())
	err := q.QueryRow(ctx, `SELECT (SELECT count(*) FROM resources WHERE `+w+`)
		+ (SELECT count(*) FROM syncer_tombstones WHERE `+w+`)`, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("resources: count: %w", err)
	}
	return n, nil
}

// Matching returns the next batch of rows and tombstones matching f with
// id > afterID (Start for all), whatever their synced_at, in id order.
func Matching(ctx context.Context, q database.Querier, f Filter, afterID int64, lim feed.Limits, scratch []Row) ([]Row, error) {
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("resources: matching: %w", err)
	}
	bytes, maxItem := batchArgs(lim)
	// The filter's parameters follow the batch's four.
	w := strings.NewReplacer("$2", "$5", "$3", "$6", "$4", "$7", "$5", "$8", "$6", "$9").Replace(f.where())
	where := after(afterID) + " AND " + w
	args := append([]any{afterID, lim.Items, bytes, maxItem}, f.args()...)
	rows, err := q.Query(ctx, fmt.Sprintf(batchSQL, where, where, ""), args...)
	if err != nil {
		return nil, fmt.Errorf("resources: select range: %w", err)
	}
	out, _, err := collect(rows, lim, scratch[:0], nil, false)
	return out, err
}

// collect reads rows of (id, version, deleted, size, payload, cands,
// captured[, extra][, kept]), and reports whether they were every
// candidate, all read: the end of what the statement's condition selects.
// Payloads are copied raw into one buffer per batch: they are passed
// through to the third party as they are, so decoding or even validating
// them (what scanning into json.RawMessage does) would be wasted work, and
// one allocation per batch is cheaper than one per row. The buffer grows
// with what was read, never ahead of it: sizing it from the first row
// (times the batch size) is what once asked for 32 GiB.
func collect(rows pgx.Rows, lim feed.Limits, out []Row, extra *int64, kept bool) ([]Row, bool, error) {
	defer rows.Close()
	bytes, maxItem := batchArgs(lim)
	var size int64
	var cands int64
	cut := false // a row was left for the next read
	dest := make([]any, 7, 9)
	if extra != nil {
		dest = append(dest, extra)
	}
	if kept {
		dest = append(dest, nil)
	}
	var arena []byte
	type span struct{ start, end int }
	var spans []span
	// The page's buffers are sized by its first row, whose cands bounds
	// how many rows follow: a hot poll reads a few rows hundreds of times
	// a second, and buffers sized for a full batch at every poll (1,000
	// rows and their payloads) were a fifth of the daemon's CPU at 500
	// inserts a second, in the allocator and the collector; sized for 64
	// rows, half of everything the daemon allocated
	// (docs/benchmarks.md, "A page's buffers, sized by its rows").
	bound := 0
	var stored int64
	// One Row the scan writes into, copied into out: its fields' addresses
	// go into dest, so a Row declared in the loop escaped to the heap once
	// a row (about 100 bytes of a drained row, issue 55).
	var r Row
	for rows.Next() {
		r = Row{}
		dest[0], dest[1], dest[2], dest[3], dest[4], dest[5], dest[6] = &r.ID, &r.Version, &r.Deleted, &stored, nil, &cands, &r.Captured
		if kept {
			dest[len(dest)-1] = &r.Kept
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, false, fmt.Errorf("resources: scan: %w", err)
		}
		if bound == 0 {
			bound = int(min(max(cands, 1), int64(max(lim.Items, 1))))
			if cap(out) < bound {
				out = make([]Row, 0, bound)
			}
			spans = make([]span, 0, bound)
		}
		raw := rows.RawValues()[4]
		if rows.FieldDescriptions()[4].Format == pgx.BinaryFormatCode && len(raw) > 0 {
			raw = raw[1:] // jsonb's binary form is a version byte, then the text
		}
		switch {
		case r.Deleted:
			raw = nil
		case raw == nil || int64(len(raw)) > maxItem:
			// The server's size said too large, or (rarely: jsonb's text
			// can be longer than its stored form) the text did.
			r.Oversize = max(stored, int64(len(raw)))
			raw = nil
		}
		if len(out) > 0 && size+int64(len(raw)) > bytes {
			cut = true
			break
		}
		if raw != nil && arena == nil {
			// Payloads of one table weigh alike; a heavier one grows it.
			arena = make([]byte, 0, min(int64(len(raw))*int64(bound), bytes, 1<<20)+int64(len(raw)))
		}
		start := len(arena)
		arena = append(arena, raw...)
		spans = append(spans, span{start, len(arena)})
		size += int64(len(raw))
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("resources: read: %w", err)
	}
	// The arena may have moved while it grew: slice it only now.
	for i, sp := range spans {
		if !out[i].Deleted && out[i].Oversize == 0 {
			out[i].Payload = arena[sp.start:sp.end:sp.end]
		}
	}
	// No candidate was left out by the rows' limit, the statement's byte
	// limit or this one: the page reached the end.
	end := !cut && cands < int64(max(lim.Items, 1)) && int64(len(out)) == cands
	return out, end, nil
}
