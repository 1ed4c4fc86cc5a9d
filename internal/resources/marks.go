package resources

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/database"
)

// The marks: what the third party answered, written on exactly the
// versions it answered, and the retry of rejected rows. Apart from the
// reads, which share the batch statement and its collector.

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

// DB is what marks and RetryFailed need: database.Querier and SendBatch,
// because a mark's statements go in one batch (one round trip, one implicit
// transaction outside of one). pgx.Tx, *pgx.Conn and *pgxpool.Pool fit.
type DB interface {
	database.Querier
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
	// setUnsynced leaves a failed version failed: only retry-failed
	// clears a failure.
	setUnsynced = `synced_at = NULL`
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

// ComposeSynced adds to s the piece that marks rows (not tombstones)
// accepted at exactly the pairs of ids and versions, placeholders of s's
// arguments (bigint[] both), as QueueMarks marks Outcomes.Synced: a
// caller composing the marks with other pieces that share the rows' keys
// (KeysSQL), one statement instead of one each (issue 55).
//
// digests, when not "", is a placeholder of the rows' accepted bodies'
// digests (bytea, each size bytes, in ids' order), kept on the rows
// (accepted_digest) by the same UPDATE: the digest a row's next version is
// compared with (PendingKept), at no write of its own (issues 55 and 57:
// an insert a row into syncer_accepted_bodies was 4-5 µs of a drain's
// database time). A row whose version moved on while its batch was out
// keeps the digest too, unmarked: the third party holds that body now,
// and the next version must be compared with it, not with an older one.
func ComposeSynced(s *compose.Statement, ids, versions, digests string, size int) {
	if digests == "" {
		s.Modify(`UPDATE resources r SET ` + setSynced + `
		FROM unnest(` + ids + `::bigint[], ` + versions + `::bigint[]) AS b(id, version)
		WHERE r.id = ANY(` + ids + `::bigint[]) AND r.id = b.id AND r.version = b.version`)
		return
	}
	n := strconv.Itoa(size)
	digest := `substring(` + digests + `::bytea FROM (b.i::int - 1) * ` + n + ` + 1 FOR ` + n + `)`
	s.Modify(`UPDATE resources r SET
			synced_at = CASE WHEN r.version = b.version THEN now() ELSE r.synced_at END,
			failed_at = CASE WHEN r.version = b.version THEN NULL ELSE r.failed_at END,
			sync_error = CASE WHEN r.version = b.version THEN NULL ELSE r.sync_error END,
			accepted_digest = ` + digest + `
		FROM unnest(` + ids + `::bigint[], ` + versions + `::bigint[]) WITH ORDINALITY AS b(id, version, i)
		WHERE r.id = ANY(` + ids + `::bigint[]) AND r.id = b.id
			AND (r.version = b.version OR r.accepted_digest IS DISTINCT FROM ` + digest + `)`)
}

// KeysSQL is the expression of the rows' keys (text[], a row's id in
// decimal: the text the wire carries) given ids, a placeholder of their
// ids (bigint[]): the keys are not sent again for the pieces that want
// them as text.
func KeysSQL(ids string) string {
	return `(` + ids + `::bigint[])::text[]`
}

// QueueDigests adds to b the statements that keep, on rows and on
// tombstones, the digests of the bodies the third party accepted (ids[i]
// accepted a body of digest sums[i]; a tombstone's digest goes to the
// tombstone), and clear those of forget, whose third-party copy is in
// doubt (a batch resent from its record, an item deferred): for a
// batch whose marks do not compose (ComposeSynced keeps a composed
// batch's). Whatever the version: the digest is of the key's last
// accepted body. Queue it in the transaction that marks the versions.
func QueueDigests(b *pgx.Batch, rows, tombstones Digests, forgetRows, forgetTombstones []int64) {
	queueDigests(b, "resources", rows)
	queueDigests(b, "syncer_tombstones", tombstones)
	queueForget(b, "resources", forgetRows)
	queueForget(b, "syncer_tombstones", forgetTombstones)
}

// Digests are ids and the digests of their accepted bodies.
type Digests struct {
	IDs  []int64
	Sums [][]byte
}

// Add appends an id and its digest.
func (d *Digests) Add(id int64, sum []byte) {
	d.IDs = append(d.IDs, id)
	d.Sums = append(d.Sums, sum)
}

func queueDigests(b *pgx.Batch, table string, d Digests) {
	if len(d.IDs) == 0 {
		return
	}
	b.Queue(`UPDATE `+table+` r SET accepted_digest = n.digest
		FROM unnest($1::bigint[], $2::bytea[]) AS n(id, digest)
		WHERE r.id = ANY($1::bigint[]) AND r.id = n.id AND r.accepted_digest IS DISTINCT FROM n.digest`, d.IDs, d.Sums).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("resources: keep digests on %s: %w", table, err)
		}
		return nil
	}
}

func queueForget(b *pgx.Batch, table string, ids []int64) {
	if len(ids) == 0 {
		return
	}
	b.Queue(`UPDATE `+table+` SET accepted_digest = NULL WHERE id = ANY($1::bigint[]) AND accepted_digest IS NOT NULL`, ids).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("resources: forget digests on %s: %w", table, err)
		}
		return nil
	}
}

// QueueUnsynced adds to b the statements that make exactly the pairs of
// rows and tombstones pending again (synced_at cleared), for a replay whose
// answer deferred them: the live export then sends them. A version that
// moved on is pending already and left alone; a failed one stays failed.
func QueueUnsynced(b *pgx.Batch, rows, tombstones Versions) {
	queueMark(b, "hand deferred rows to the live export", "resources", setUnsynced, rows, nil, nil)
	queueMark(b, "hand deferred rows to the live export", "syncer_tombstones", setUnsynced, tombstones, nil, nil)
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
