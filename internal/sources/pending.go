package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/feed"
)

// Row is one pending item of a source: a key at a version, with its payload,
// or a tombstone when the row is gone.
type Row struct {
	// Key is the key's text form: the item's id.
	Key string
	// Version is the highest seq of the key's pending changes.
	Version int64
	// Deleted is true when the row no longer exists; Payload is then nil.
	Deleted bool
	// Payload is the row (or its configured columns) as a JSON object.
	Payload json.RawMessage
	// Oversize is the payload's size in bytes when it is larger than
	// feed.Limits.MaxItemBytes: the payload was not returned, and the key
	// is to be recorded failed at this version rather than sent. 0
	// otherwise.
	Oversize int64
	// Kept is the digest internal/unchanged keeps for the key, when the
	// read was PendingKept; nil when none is kept.
	Kept []byte
	// Captured is when the version was captured: the latest changed_at
	// (the start of the writing transaction) of the key's pending
	// changes, taken in the aggregate that finds Version. It is the
	// newest change's own unless an older transaction wrote the key after
	// a younger one committed, and then later than it by less than that
	// transaction lasted.
	Captured time.Time
}

// ErrSchemaChanged is matched (errors.Is) by every *SchemaError.
var ErrSchemaChanged = errors.New("sources: a source's table no longer matches its configuration")

// SchemaError says that a source's table, key or configured column is gone
// or changed since `syncer migrate` installed it. The source cannot be
// exported until the table or the configuration is fixed (and migrate run);
// other sources are not concerned.
type SchemaError struct {
	// Source is the source's name.
	Source string
	// Table is schema.table.
	Table string
	// Column is the column that is gone or changed; empty when the table
	// itself is gone.
	Column string
	// Problem says what happened to it.
	Problem string
}

func (e *SchemaError) Error() string {
	what := "table " + e.Table
	if e.Column != "" {
		what = "column " + e.Column + " of " + e.Table
	}
	return "sources: source " + e.Source + ": " + what + " " + e.Problem +
		": fix the table or the source's configuration and run syncer migrate"
}

// Is makes errors.Is(err, ErrSchemaChanged) true.
func (e *SchemaError) Is(target error) bool { return target == ErrSchemaChanged }

// Page is one read of a source's pending items.
type Page struct {
	Rows []Row
	// End is true when no limit left a pending key after the cursor out:
	// the read saw every one there was.
	End bool
}

// Pending returns the next batch of src's pending items in key order: after
// afterKey (a Row.Key returned before), or from the first key when first is
// true. Each item carries its key's highest pending seq as its version, and
// the row read in the same statement (nil when it is gone: a tombstone).
// Keys whose failed version has no later change are not pending. It reads
// one item past a byte limit at most and leaves it for the next call. A
// payload larger than lim.MaxItemBytes is not returned: its row comes with
// Oversize set, as resources' rows do.
//
// A source whose table, key or configured column is gone returns a
// *SchemaError. Call it on a pool, not in a transaction, so that the
// error's cause can still be looked up.
func Pending(ctx context.Context, q database.Querier, src *Source, afterKey string, first bool, lim feed.Limits) (Page, error) {
	return pending(ctx, q, src, afterKey, first, lim, false)
}

// PendingKept is Pending, and each row comes with the digest of the body
// last accepted for its key (Row.Kept) that internal/unchanged keeps
// under the source's name: read in the same statement, not in one more a
// page (docs/benchmarks.md, "No request for an unchanged row"). Of a
// tenant's scope, the tenant's items of the scope's lane (tenantPending).
func PendingKept(ctx context.Context, q database.Querier, src *Source, sc Scope, afterKey string, first bool, lim feed.Limits) (Page, error) {
	if sc.Tenant != "" {
		return tenantPending(ctx, q, src, sc.Lane, sc.Tenant, afterKey, first, lim)
	}
	return pending(ctx, q, src, afterKey, first, lim, true)
}

func pending(ctx context.Context, q database.Querier, src *Source, afterKey string, first bool, lim feed.Limits, kept bool) (Page, error) {
	// The limits come whole: the exporter's Config applied their defaults.
	if err := lim.Validate(); err != nil {
		return Page{}, fmt.Errorf("sources: %s: pending: %w", src.Name, err)
	}
	sql, args := src.sql.pendingFirst, []any{src.Name, lim.Items, lim.MaxItemBytes}
	if kept {
		sql = src.sql.keptFirst
	}
	if !first {
		num, err := src.num(afterKey)
		if err != nil {
			return Page{}, err
		}
		sql, args = src.sql.pendingAfter, append(args, num, afterKey)
		if kept {
			sql = src.sql.keptAfter
		}
	}
	if src.Columns != nil {
		args = append(args, src.Columns)
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return Page{}, src.explain(ctx, q, fmt.Errorf("sources: source %s: select pending: %w", src.Name, err))
	}
	out, end, err := collect(rows, lim, kept)
	if err != nil {
		return Page{}, src.explain(ctx, q, fmt.Errorf("sources: source %s: %w", src.Name, err))
	}
	return Page{Rows: out, End: end}, nil
}

// num is a key's position among integer keys (0 for other kinds).
func (s *Source) num(key string) (int64, error) {
	if s.Kind != KeyInteger {
		return 0, nil
	}
	n, err := strconv.ParseInt(key, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sources: source %s: key %q is not an integer", s.Name, key)
	}
	return n, nil
}

func (s *Source) nums(keys []string) ([]int64, error) {
	out := make([]int64, len(keys))
	for i, k := range keys {
		n, err := s.num(k)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// collect reads (key, version, deleted, payload, size, captured[, kept])
// rows, and reports whether they reached the end of the pending keys.
// Payloads are copied raw into one buffer per batch: they go to the third
// party as they are.
func collect(rows pgx.Rows, lim feed.Limits, kept bool) ([]Row, bool, error) {
	defer rows.Close()
	var out []Row
	var arena []byte
	type span struct{ start, end int }
	var spans []span
	size, read := 0, 0
	cut := false // a key was left for the next read
	// One Row and one dest the scans share, r copied into out: declared
	// in the loop, both escaped to the heap once a row (issue 55).
	var r Row
	var stored int64
	dest := []any{&r.Key, &r.Version, &r.Deleted, nil, &stored, &r.Captured}
	if kept {
		dest = append(dest, &r.Kept)
	}
	for rows.Next() {
		read++
		r, stored = Row{}, 0
		if err := rows.Scan(dest...); err != nil {
			return nil, false, fmt.Errorf("scan: %w", err)
		}
		raw := rows.RawValues()[3]
		if raw != nil && rows.FieldDescriptions()[3].Format == pgx.BinaryFormatCode && len(raw) > 0 {
			raw = raw[1:] // jsonb's binary form is a version byte, then the text
		}
		if !r.Deleted && (raw == nil || len(raw) > lim.MaxItemBytes) {
			// The stored size said too large, or (rarely: jsonb's text
			// can be longer than its stored form) the text did.
			r.Oversize = max(stored, int64(len(raw)))
			raw = nil
		}
		if len(out) > 0 && size+len(raw) > lim.Bytes {
			cut = true
			break
		}
		sp := span{-1, -1}
		if raw != nil {
			if arena == nil {
				// Sized for a few keys and grown by append: a hot poll
				// reads a few keys hundreds of times a second, and
				// resources' arena, sized for 64 rows, was half of what
				// the daemon allocated (docs/benchmarks.md, "A page's
				// buffers, sized by its rows"); a full batch grows
				// through six doublings, a small cost next to reading
				// it.
				arena = make([]byte, 0, min(min(max(lim.Items, 1), 8)*(len(raw)+16), lim.Bytes+len(raw)))
			}
			sp.start = len(arena)
			arena = append(arena, raw...)
			sp.end = len(arena)
		}
		spans = append(spans, sp)
		size += len(raw)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read pending: %w", err)
	}
	// The arena may have moved while it grew: slice it only now.
	for i, sp := range spans {
		if sp.start >= 0 {
			out[i].Payload = arena[sp.start:sp.end:sp.end]
		}
	}
	// Fewer keys than the limit, all taken: the statement saw the end.
	return out, !cut && read < lim.Items, nil
}

// explain turns an error that a change of the table explains into a
// *SchemaError; any other error is returned as it is.
func (s *Source) explain(ctx context.Context, q database.Querier, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "42703", "42P01", "42883", "42804", "22P02": // undefined column, table, function; datatype mismatch; bad text
	default:
		return err
	}
	if se := s.diagnose(ctx, q); se != nil {
		return se
	}
	return err
}

// Check reports whether src's capture still works: its table exists under
// its name, with the source's capture trigger enabled on it. A *SchemaError
// says what is wrong (the table dropped, renamed, re-created without the
// triggers, or the triggers dropped or disabled): no write of it is being
// captured, and nothing else would say so, since no change comes. The
// daemon checks before each run of the source.
func Check(ctx context.Context, q database.Querier, src *Source) error {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger tg
		WHERE tg.tgrelid = to_regclass($1) AND tg.tgname = `+triggerNameSQL("$2::text", "insert")+` AND tg.tgenabled <> 'D')`,
		src.table(), src.Name).Scan(&ok)
	if err != nil {
		return fmt.Errorf("sources: source %s: check its triggers: %w", src.Name, err)
	}
	if ok {
		return nil
	}
	if se := src.diagnose(ctx, q); se != nil {
		return se
	}
	return &SchemaError{Source: src.Name, Table: src.QualifiedTable(),
		Problem: "has no enabled capture trigger of this source (dropped, disabled, or the table re-created): its writes are not captured"}
}

// diagnose compares the table with what was installed; nil when it finds
// nothing wrong (or cannot look).
func (s *Source) diagnose(ctx context.Context, q database.Querier) *SchemaError {
	se := &SchemaError{Source: s.Name, Table: s.QualifiedTable()}
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.table()).Scan(&exists); err != nil {
		return nil
	}
	if !exists {
		// Renamed or moved: the triggers went with the table.
		var now string
		err := q.QueryRow(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_trigger tg
			JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE tg.tgname = `+triggerNameSQL("$1::text", "insert")+` AND tg.tgparentid = 0 LIMIT 1`, s.Name).Scan(&now)
		if err == nil {
			se.Problem = "was renamed to " + now
			return se
		}
		se.Problem = "no longer exists"
		return se
	}
	cols := append(slices.Clone(s.Keys), s.Columns...)
	rows, err := q.Query(ctx, `SELECT u.c, format_type(a.atttypid, a.atttypmod)
		FROM unnest($2::text[]) WITH ORDINALITY AS u(c, i)
		LEFT JOIN pg_attribute a ON a.attrelid = to_regclass($1) AND a.attname = u.c AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY u.i`, s.table(), cols)
	if err != nil {
		return nil
	}
	type col struct {
		name string
		typ  *string
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		err := r.Scan(&c.name, &c.typ)
		return c, err
	})
	if err != nil {
		return nil
	}
	for i, c := range found {
		switch {
		case c.typ == nil:
			se.Column, se.Problem = c.name, "no longer exists"
			return se
		case i == 0 && *c.typ != s.KeyType:
			se.Column, se.Problem = c.name, fmt.Sprintf("changed type from %s to %s", s.KeyType, *c.typ)
			return se
		}
	}
	return nil
}

// MarkSynced records that the third party accepted keys at versions: it
// deletes their changes up to those versions (and failures they
// supersede). A change that arrived since is kept, so its key stays
// pending at its higher version. Run it in the transaction that marks the
// batch, or queue it there with QueueMarks.
func MarkSynced(ctx context.Context, db BatchSender, src *Source, keys []string, versions []int64) error {
	return send(ctx, db, func(b *pgx.Batch) error { return QueueMarks(b, src, Scope{}, keys, versions, nil, nil, nil) })
}

// MarkFailed records that the third party rejected keys at versions, with
// its error texts: the failure is kept, and the changes up to those
// versions are deleted, so the key is not sent again until a later change
// (which makes it pending at a higher version) or RetryFailed.
func MarkFailed(ctx context.Context, db BatchSender, src *Source, keys []string, versions []int64, errs []string) error {
	return send(ctx, db, func(b *pgx.Batch) error { return QueueMarks(b, src, Scope{}, nil, nil, keys, versions, errs) })
}

// BatchSender is database.Querier that also sends a pgx.Batch, because a
// mark's statements go in one batch (one round trip): a transaction, a
// connection or a pool.
type BatchSender interface {
	database.Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

func send(ctx context.Context, db BatchSender, queue func(*pgx.Batch) error) error {
	b := &pgx.Batch{}
	if err := queue(b); err != nil {
		return err
	}
	return db.SendBatch(ctx, b).Close()
}

// deleteChanges deletes the changes of the keys in b up to their
// versions, finding each key's changes through the index, one lookup per
// key: a prepared statement's first five runs get plans made for their
// values, and joining a thousand keys to the change log, PostgreSQL hashed
// the whole log (27 ms against 4 over 100,000 changes, and it grows with
// the backlog). The OFFSET 0 keeps the lookup a subquery of its own.
//
// The changes found are deleted by their ctid (a TID scan), not by seq:
// the change log has no index on seq since migration 031, one B-tree
// insert less for every change a writer captures. A change whose row
// another transaction moved meanwhile (a relane at migrate) is skipped
// and sent again, as after a crash between a send and its mark.
//
// source is the SQL of the source's name and keys a relation named b of
// (num, key, version): "$1" and "b" in the marks' statements, their own
// arguments in a composed one (ComposeSynced).
func deleteChanges(source, keys string) string {
	return `DELETE FROM syncer_changes WHERE ctid = ANY (ARRAY(
		SELECT c.ctid FROM ` + keys + ` CROSS JOIN LATERAL (SELECT ctid FROM syncer_changes c
			WHERE c.source = ` + source + ` AND c.num = b.num AND c.key = b.key COLLATE "C" AND c.seq <= b.version
			OFFSET 0) c))`
}

var deleteChangesSQL = deleteChanges("$1", "b")

var markSyncedSQL = `WITH b AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::bigint[]) AS b(num, key, version)),
	done AS (` + deleteChangesSQL + `)
	DELETE FROM syncer_source_failures f USING b
		WHERE f.source = $1 AND f.key = b.key COLLATE "C" AND f.version <= b.version`

var markFailedSQL = `WITH b AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::text[]) AS b(num, key, version, error)),
	done AS (` + deleteChangesSQL + `)
	INSERT INTO syncer_source_failures AS f (source, key, num, version, error)
		SELECT $1, b.key, b.num, b.version, b.error FROM b
	ON CONFLICT (source, key) WHERE tenant IS NULL DO UPDATE SET num = excluded.num, version = excluded.version,
		error = excluded.error, failed_at = now()
		WHERE f.version <= excluded.version`

// QueueMarks adds to b the statements of MarkSynced (accepted) and
// MarkFailed (rejected, with errs), for a caller that sends them with other
// statements in one round trip. Of a tenant's scope, the marks are the
// tenant's: its changes deleted, its failures recorded.
func QueueMarks(b *pgx.Batch, src *Source, sc Scope, accepted []string, acceptedVersions []int64, rejected []string, rejectedVersions []int64, errs []string) error {
	if sc.Tenant != "" {
		return queueTenantMarks(b, src, sc.Tenant, accepted, acceptedVersions, rejected, rejectedVersions, errs)
	}
	if err := queueMark(b, src, "mark synced", markSyncedSQL, accepted, acceptedVersions); err != nil {
		return err
	}
	return queueMark(b, src, "mark failed", markFailedSQL, rejected, rejectedVersions, errs)
}

func queueMark(b *pgx.Batch, src *Source, what, sql string, keys []string, versions []int64, extra ...any) error {
	if len(keys) == 0 {
		return nil
	}
	nums, err := src.nums(keys)
	if err != nil {
		return err
	}
	b.Queue(sql, append([]any{src.Name, nums, keys, versions}, extra...)...).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("sources: source %s: %s: %w", src.Name, what, err)
		}
		return nil
	}
	return nil
}

// RetryFailed makes every failed key of the source pending again, at a new
// (higher) version, and returns how many. The new version gives the batch
// a new body, so it never reuses the Idempotency-Key the third party
// rejected. Of a tenant's scope, only the tenant's failed keys, each
// logged again for the tenant it failed for.
func RetryFailed(ctx context.Context, e database.Querier, src string, sc Scope) (int64, error) {
	if sc.Tenant != "" {
		return retryFailedTenant(ctx, e, src, sc.Tenant)
	}
	tag, err := e.Exec(ctx, `WITH f AS (DELETE FROM syncer_source_failures WHERE source = $1 RETURNING num, key, tenant)
		INSERT INTO syncer_changes (source, num, key, deleted, tenant, lane) SELECT $1, num, key, false, f.tenant, `+relogLaneSQL+` FROM f ORDER BY num, key`, src)
	if err != nil {
		return 0, fmt.Errorf("sources: source %s: retry failed: %w", src, err)
	}
	return tag.RowsAffected(), nil
}

// AnyPending reports whether the source has a pending change. It only
// touches the change log's index, so it is cheap enough to poll. Of a
// tenant's scope, a change for the tenant, or for no tenant yet (which
// AdoptUntenanted gives the row's tenant).
func AnyPending(ctx context.Context, q database.Querier, src string, sc Scope) (bool, error) {
	var ok bool
	var err error
	if sc.Tenant != "" {
		err = q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM syncer_changes WHERE source = $1 AND tenant = $2)
			OR EXISTS (SELECT 1 FROM syncer_changes WHERE source = $1 AND tenant IS NULL)`, src, sc.Tenant).Scan(&ok)
	} else {
		err = q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM syncer_changes WHERE source = $1)`, src).Scan(&ok)
	}
	if err != nil {
		return false, fmt.Errorf("sources: source %s: any pending: %w", src, err)
	}
	return ok, nil
}

// ComposeSynced adds to s the marks of MarkSynced for keys at versions, as
// pieces of one statement (internal/compose) that also writes their story
// and digests: the changes up to those versions deleted, and the failures
// they supersede. It returns the expressions of s that are the keys
// (text[]) and the versions (bigint[]), sent once for every piece.
func ComposeSynced(s *compose.Statement, src *Source, keys []string, versions []int64) (keysSQL, versionsSQL string, err error) {
	nums, err := src.nums(keys)
	if err != nil {
		return "", "", err
	}
	name, n := s.Arg(src.Name), s.Arg(nums)
	keysSQL, versionsSQL = s.Arg(keys)+`::text[]`, s.Arg(versions)+`::bigint[]`
	s.Modify(deleteChanges(name+"::text", "unnest("+n+"::bigint[], "+keysSQL+", "+versionsSQL+") AS b(num, key, version)"))
	s.Modify(`DELETE FROM syncer_source_failures f USING unnest(` + keysSQL + `, ` + versionsSQL + `) AS b(key, version)
		WHERE f.source = ` + name + `::text AND f.key = b.key COLLATE "C" AND f.version <= b.version`)
	return keysSQL, versionsSQL, nil
}
