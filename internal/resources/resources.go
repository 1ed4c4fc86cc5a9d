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
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
}

// Querier is what reads need: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer is what marks need; marks run inside the lock's transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// batchArgs are a batch's byte bound and item bound as the statements take
// them.
func batchArgs(l feed.Limits) (bytes, maxItem int64) {
	l = l.WithDefaults()
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
const batchSQL = `SELECT id, version, deleted, size,
	CASE WHEN NOT deleted AND size <= $4 THEN payload END, cands%[3]s
FROM (
	SELECT c.*,
		sum(CASE WHEN size <= $4 THEN size ELSE 0 END) OVER w AS upto,
		row_number() OVER w AS n
	FROM (
		SELECT b.id, b.version, b.deleted, b.payload, b.cands,
			CASE WHEN b.deleted THEN 0
			     WHEN pg_column_compression(b.payload) IS NULL THEN b.lower
			     ELSE octet_length(b.payload::text) END AS size
		FROM (
			SELECT a.*, sum(a.lower) OVER (ORDER BY a.id ROWS UNBOUNDED PRECEDING) - a.lower AS before,
				count(*) OVER () AS cands
			FROM (
				(SELECT id, version, false AS deleted, payload, pg_column_size(payload) AS lower
				   FROM resources WHERE %[1]s ORDER BY id LIMIT $2)
				UNION ALL
				(SELECT id, version, true, NULL::jsonb, 0
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

var pendingSQL = [2]string{
	fmt.Sprintf(batchSQL, pendingWhere+after(Start), pendingWhere+after(Start), `, (SELECT live FROM syncer_generation)`),
	fmt.Sprintf(batchSQL, pendingWhere+after(0), pendingWhere+after(0), `, (SELECT live FROM syncer_generation)`),
}

func pendingQuery(afterID int64) string {
	if afterID == Start {
		return pendingSQL[0]
	}
	return pendingSQL[1]
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
func Pending(ctx context.Context, q Querier, afterID int64, lim feed.Limits, scratch []Row) (Page, error) {
	bytes, maxItem := batchArgs(lim)
	rows, err := q.Query(ctx, pendingQuery(afterID), afterID, lim.Items, bytes, maxItem)
	if err != nil {
		return Page{}, fmt.Errorf("resources: select pending: %w", err)
	}
	var p Page
	p.Rows, p.End, err = collect(rows, lim, scratch[:0], &p.Gen)
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
func Count(ctx context.Context, q Querier, f Filter) (int64, error) {
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
func Matching(ctx context.Context, q Querier, f Filter, afterID int64, lim feed.Limits, scratch []Row) ([]Row, error) {
	bytes, maxItem := batchArgs(lim)
	// The filter's parameters follow the batch's four.
	w := strings.NewReplacer("$2", "$5", "$3", "$6", "$4", "$7", "$5", "$8", "$6", "$9").Replace(f.where())
	where := after(afterID) + " AND " + w
	args := append([]any{afterID, lim.Items, bytes, maxItem}, f.args()...)
	rows, err := q.Query(ctx, fmt.Sprintf(batchSQL, where, where, ""), args...)
	if err != nil {
		return nil, fmt.Errorf("resources: select range: %w", err)
	}
	out, _, err := collect(rows, lim, scratch[:0], nil)
	return out, err
}

// collect reads rows of (id, version, deleted, size, payload, cands[,
// extra]), and reports whether they were every candidate, all read: the
// end of what the statement's condition selects.
// Payloads are copied raw into one buffer per batch: they are passed
// through to the third party as they are, so decoding or even validating
// them (what scanning into json.RawMessage does) would be wasted work, and
// one allocation per batch is cheaper than one per row. The buffer grows
// with what was read, never ahead of it: sizing it from the first row
// (times the batch size) is what once asked for 32 GiB.
func collect(rows pgx.Rows, lim feed.Limits, out []Row, extra *int64) ([]Row, bool, error) {
	defer rows.Close()
	bytes, maxItem := batchArgs(lim)
	var size int64
	var cands int64
	cut := false // a row was left for the next read
	dest := make([]any, 6, 7)
	if extra != nil {
		dest = append(dest, extra)
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
	for rows.Next() {
		var r Row
		dest[0], dest[1], dest[2], dest[3], dest[4], dest[5] = &r.ID, &r.Version, &r.Deleted, &stored, nil, &cands
		if err := rows.Scan(dest...); err != nil {
			return nil, false, fmt.Errorf("resources: scan: %w", err)
		}
		if bound == 0 {
			bound = int(min(max(cands, 1), int64(max(lim.Items, 1))))
			if cap(out) == 0 {
				out = make([]Row, 0, bound)
				spans = make([]span, 0, bound)
			}
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

// Versions are the (id, version) pairs of a batch, as two arrays so one
// statement can mark them all.
type Versions struct {
	IDs      []int64
	Versions []int64
}

// Add appends a pair.
func (v *Versions) Add(id, version int64) {
	v.IDs = append(v.IDs, id)
	v.Versions = append(v.Versions, version)
}

// Len is the number of pairs.
func (v *Versions) Len() int { return len(v.IDs) }

// DB is what marks and RetryFailed need. pgx.Tx, *pgx.Conn and
// *pgxpool.Pool fit.
type DB interface {
	Execer
	Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// mark runs set on the rows and the tombstones of exactly the pairs of v,
// in one batch (one implicit transaction outside of one), and returns how
// many it changed. A pair names a row or a tombstone, never both: an id is
// in one table at a time.
func mark(ctx context.Context, db DB, what, set string, v Versions, errs []string) (int64, error) {
	var n int64
	b := &pgx.Batch{}
	queueMark(b, what, "resources", set, v, errs, &n)
	queueMark(b, what, "syncer_tombstones", set, v, errs, &n)
	err := db.SendBatch(ctx, b).Close()
	return n, err
}

const (
	setSynced = `synced_at = now(), failed_at = NULL, sync_error = NULL`
	setFailed = `failed_at = now(), sync_error = b.err`
)

// Outcomes are a batch's answers, to be marked: the versions the third
// party accepted and rejected (with its error texts, one per version), of
// rows and of tombstones apart. A row's version and a tombstone's never
// match each other's table (an id that comes back goes on above its
// tombstone), so each statement touches only its own table: a batch of
// tombstones probing resources for each id once cost a third of its mark.
type Outcomes struct {
	Synced, SyncedTombstones Versions
	Failed, FailedTombstones Versions
	Errs, TombstoneErrs      []string
}

// QueueMarks adds to b the statements that mark o (as MarkSynced and
// MarkFailed do, but each on its own table), for a caller that sends them
// with other statements in one round trip.
func QueueMarks(b *pgx.Batch, o Outcomes) {
	queueMark(b, "mark synced", "resources", setSynced, o.Synced, nil, nil)
	queueMark(b, "mark synced", "syncer_tombstones", setSynced, o.SyncedTombstones, nil, nil)
	queueMark(b, "mark failed", "resources", setFailed, o.Failed, o.Errs, nil)
	queueMark(b, "mark failed", "syncer_tombstones", setFailed, o.FailedTombstones, o.TombstoneErrs, nil)
}

// queueMark adds the statement that runs set on table for exactly the
// pairs of v, and adds the rows it changed to *n if n is not nil.
//
// "r.id = ANY($1)" repeats the join's condition on purpose. Without it, the
// custom plans PostgreSQL makes for a prepared statement's first five runs
// see an unnest of a thousand ids and join it by hashing the whole table: a
// sequential scan per mark (70 ms over 100,000 tombstones, seconds over a
// large table) for the first marks after every start. With it, every plan
// reads the table by its primary key.
func queueMark(b *pgx.Batch, what, table, set string, v Versions, errs []string, n *int64) {
	if v.Len() == 0 {
		return
	}
	b.Queue(`UPDATE `+table+` r SET `+set+`
		FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS b(id, version, err)
		WHERE r.id = ANY($1::bigint[]) AND r.id = b.id AND r.version = b.version`, v.IDs, v.Versions, errs).Fn = func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err != nil {
			return fmt.Errorf("resources: %s: %w", what, err)
		}
		if n != nil {
			*n += tag.RowsAffected()
		}
		return nil
	}
}

// MarkSynced marks exactly the given versions of rows and tombstones as
// accepted by the third party and returns how many it marked; a row whose
// version has moved on is left pending.
func MarkSynced(ctx context.Context, db DB, v Versions) (int64, error) {
	return mark(ctx, db, "mark synced", setSynced, v, nil)
}

// MarkFailed records the given versions of rows and tombstones as
// rejected, with the third party's error text. They are not pending again
// until the row changes (is deleted, for a row; comes back, for a
// tombstone) or RetryFailed clears them.
func MarkFailed(ctx context.Context, db DB, v Versions, errs []string) (int64, error) {
	return mark(ctx, db, "mark failed", setFailed, v, errs)
}

// RetryFailed makes failed rows and tombstones pending again: all of them
// when ids is empty. It returns how many it changed. It also bumps the live
// generation, which salts the live sync's Idempotency-Keys: a retried row
// goes out under a key the third party has not answered yet, even in a batch
// of the same content as the one it rejected. Run it in a transaction.
func RetryFailed(ctx context.Context, db DB, ids []int64) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `WITH r AS (UPDATE resources SET failed_at = NULL, sync_error = NULL, synced_at = NULL
			WHERE failed_at IS NOT NULL AND (coalesce(cardinality($1::bigint[]), 0) = 0 OR id = ANY($1)) RETURNING 1),
		t AS (UPDATE syncer_tombstones SET failed_at = NULL, sync_error = NULL, synced_at = NULL
			WHERE failed_at IS NOT NULL AND (coalesce(cardinality($1::bigint[]), 0) = 0 OR id = ANY($1)) RETURNING 1)
		SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM t)`, ids).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("resources: retry failed: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := db.Exec(ctx, `UPDATE syncer_generation SET live = live + 1`); err != nil {
		return 0, fmt.Errorf("resources: bump generation: %w", err)
	}
	return n, nil
}

// LiveSalt is the key salt of the live sync at generation gen. Generation 0
// has the empty salt.
func LiveSalt(gen int64) string {
	if gen == 0 {
		return ""
	}
	return "live-" + strconv.FormatInt(gen, 10)
}

// AnyPending reports whether a pending row or tombstone exists. It only
// touches the pending indexes, so it is cheap enough to poll.
func AnyPending(ctx context.Context, q Querier) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM resources WHERE synced_at IS NULL AND failed_at IS NULL)
		OR EXISTS (SELECT 1 FROM syncer_tombstones WHERE synced_at IS NULL AND failed_at IS NULL)`).Scan(&ok)
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
func CountAll(ctx context.Context, q Querier) (Counts, error) {
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
func RecentFailures(ctx context.Context, q Querier, limit int) ([]Failure, error) {
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
