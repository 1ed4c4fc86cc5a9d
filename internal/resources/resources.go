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
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Row is one exported row at one version.
type Row struct {
	ID      int64
	Version int64
	Payload json.RawMessage
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

// Limits bound one batch.
type Limits struct {
	// Rows is the most rows a batch holds.
	Rows int
	// Bytes is the most payload bytes a batch holds; a single row larger than
	// this still forms a batch of its own. 0 means no limit.
	Bytes int
}

// Start is the position before every row: a read after Start includes the
// row whose id is the smallest a bigint holds, so every id is exported.
const Start int64 = math.MinInt64

const startSQL = "-9223372036854775808"

// Pending returns the next batch of pending rows with id > afterID, in id
// order, and the live generation read in the same statement (see
// RetryFailed). It reads one row past a byte limit at most and leaves that
// row for the next call. scratch, if non-nil, is reused to spare
// allocations.
func Pending(ctx context.Context, q Querier, afterID int64, lim Limits, scratch []Row) ([]Row, int64, error) {
	rows, err := q.Query(ctx, `SELECT id, version, payload, (SELECT live FROM syncer_generation) FROM resources
		WHERE synced_at IS NULL AND failed_at IS NULL AND (id > $1 OR (id = $1 AND $1 = `+startSQL+`))
		ORDER BY id LIMIT $2`, afterID, lim.Rows)
	if err != nil {
		return nil, 0, fmt.Errorf("resources: select pending: %w", err)
	}
	var gen int64
	out, err := collect(rows, lim, scratch[:0], &gen)
	return out, gen, err
}

// Filter selects rows for a replay.
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

// Count returns how many rows match f.
func Count(ctx context.Context, q Querier, f Filter) (int64, error) {
	var n int64
	args := append([]any{int64(0)}, f.args()...)
	err := q.QueryRow(ctx, `SELECT count(*) FROM resources WHERE id > $1 AND `+f.where(), args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("resources: count: %w", err)
	}
	return n, nil
}

// Matching returns the next batch of rows matching f with id > afterID,
// whatever their synced_at, in id order.
func Matching(ctx context.Context, q Querier, f Filter, afterID int64, lim Limits, scratch []Row) ([]Row, error) {
	args := append([]any{afterID}, f.args()...)
	args = append(args, lim.Rows)
	rows, err := q.Query(ctx, `SELECT id, version, payload FROM resources
		WHERE (id > $1 OR (id = $1 AND $1 = `+startSQL+`)) AND `+f.where()+` ORDER BY id LIMIT $7`, args...)
	if err != nil {
		return nil, fmt.Errorf("resources: select range: %w", err)
	}
	return collect(rows, lim, scratch[:0], nil)
}

// collect reads rows of (id, version, payload[, extra]). Payloads are
// copied raw into one buffer per batch: they are passed through to the third
// party as they are, so decoding or even validating them (what scanning into
// json.RawMessage does) would be wasted work, and one allocation per batch
// is cheaper than one per row.
func collect(rows pgx.Rows, lim Limits, out []Row, extra *int64) ([]Row, error) {
	defer rows.Close()
	size := 0
	dest := make([]any, 3, 4)
	if extra != nil {
		dest = append(dest, extra)
	}
	var arena []byte
	type span struct{ start, end int }
	var spans []span
	for rows.Next() {
		var r Row
		dest[0], dest[1], dest[2] = &r.ID, &r.Version, nil
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("resources: scan: %w", err)
		}
		raw := rows.RawValues()[2]
		if rows.FieldDescriptions()[2].Format == pgx.BinaryFormatCode && len(raw) > 0 {
			raw = raw[1:] // jsonb's binary form is a version byte, then the text
		}
		if lim.Bytes > 0 && len(out) > 0 && size+len(raw) > lim.Bytes {
			break
		}
		if arena == nil {
			arena = make([]byte, 0, max(lim.Rows, 1)*(len(raw)+16))
		}
		start := len(arena)
		arena = append(arena, raw...)
		spans = append(spans, span{start, len(arena)})
		size += len(raw)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("resources: read: %w", err)
	}
	// The arena may have moved while it grew: slice it only now.
	for i, sp := range spans {
		out[i].Payload = arena[sp.start:sp.end:sp.end]
	}
	return out, nil
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

// MarkSynced marks exactly the given versions as accepted by the third party
// and returns how many rows it marked; a row whose version has moved on is
// left pending.
func MarkSynced(ctx context.Context, e Execer, v Versions) (int64, error) {
	if v.Len() == 0 {
		return 0, nil
	}
	tag, err := e.Exec(ctx, `UPDATE resources r SET synced_at = now(), failed_at = NULL, sync_error = NULL
		FROM unnest($1::bigint[], $2::bigint[]) AS b(id, version)
		WHERE r.id = b.id AND r.version = b.version`, v.IDs, v.Versions)
	if err != nil {
		return 0, fmt.Errorf("resources: mark synced: %w", err)
	}
	return tag.RowsAffected(), nil
}

// MarkFailed records the given versions as rejected, with the third party's
// error text. They are not pending again until their payload changes or
// RetryFailed clears them.
func MarkFailed(ctx context.Context, e Execer, v Versions, errs []string) (int64, error) {
	if v.Len() == 0 {
		return 0, nil
	}
	tag, err := e.Exec(ctx, `UPDATE resources r SET failed_at = now(), sync_error = b.err
		FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS b(id, version, err)
		WHERE r.id = b.id AND r.version = b.version`, v.IDs, v.Versions, errs)
	if err != nil {
		return 0, fmt.Errorf("resources: mark failed: %w", err)
	}
	return tag.RowsAffected(), nil
}

// RetryFailed makes failed rows pending again: all of them when ids is
// empty. It returns how many rows it changed. It also bumps the live
// generation, which salts the live sync's Idempotency-Keys: a retried row
// goes out under a key the third party has not answered yet, even in a batch
// of the same content as the one it rejected. Run it in a transaction.
func RetryFailed(ctx context.Context, e Execer, ids []int64) (int64, error) {
	tag, err := e.Exec(ctx, `UPDATE resources SET failed_at = NULL, sync_error = NULL, synced_at = NULL
		WHERE failed_at IS NOT NULL AND (coalesce(cardinality($1::bigint[]), 0) = 0 OR id = ANY($1))`, ids)
	if err != nil {
		return 0, fmt.Errorf("resources: retry failed: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return 0, nil
	}
	if _, err := e.Exec(ctx, `UPDATE syncer_generation SET live = live + 1`); err != nil {
		return 0, fmt.Errorf("resources: bump generation: %w", err)
	}
	return tag.RowsAffected(), nil
}

// LiveSalt is the key salt of the live sync at generation gen. Generation 0
// has the empty salt.
func LiveSalt(gen int64) string {
	if gen == 0 {
		return ""
	}
	return "live-" + strconv.FormatInt(gen, 10)
}

// AnyPending reports whether a pending row exists. It only touches the
// pending index, so it is cheap enough to poll.
func AnyPending(ctx context.Context, q Querier) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM resources WHERE synced_at IS NULL AND failed_at IS NULL)`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("resources: any pending: %w", err)
	}
	return ok, nil
}

// Counts summarises the table for status.
type Counts struct {
	Total, Unsynced, Synced, Failed int64
	OldestUnsyncedAge               time.Duration
}

// CountAll returns the table's counts. Unsynced counts every row not synced
// (pending or failed); Failed those whose current version was rejected; the
// age is that of the oldest pending version, from the change that made it.
func CountAll(ctx context.Context, q Querier) (Counts, error) {
	var c Counts
	var age float64
	err := q.QueryRow(ctx, `SELECT count(*),
			count(*) FILTER (WHERE synced_at IS NULL),
			count(*) FILTER (WHERE synced_at IS NOT NULL),
			count(*) FILTER (WHERE failed_at IS NOT NULL),
			COALESCE(EXTRACT(EPOCH FROM now() - min(changed_at) FILTER (WHERE synced_at IS NULL AND failed_at IS NULL)), 0)::float8
		FROM resources`).Scan(&c.Total, &c.Unsynced, &c.Synced, &c.Failed, &age)
	if err != nil {
		return c, fmt.Errorf("resources: counts: %w", err)
	}
	c.OldestUnsyncedAge = time.Duration(age * float64(time.Second))
	return c, nil
}

// Failure is one failed row, for status.
type Failure struct {
	ID       int64
	Version  int64
	FailedAt time.Time
	Error    string
}

// RecentFailures returns the most recently failed rows.
func RecentFailures(ctx context.Context, q Querier, limit int) ([]Failure, error) {
	rows, err := q.Query(ctx, `SELECT id, version, failed_at, COALESCE(sync_error, '') FROM resources
		WHERE failed_at IS NOT NULL ORDER BY failed_at DESC, id DESC LIMIT $1`, limit)
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
