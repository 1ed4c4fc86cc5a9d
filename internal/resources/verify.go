package resources

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
)

// Held is one id as `syncer verify` compares it: a row or the tombstone of
// a deleted one, at its current version.
type Held struct {
	ID      int64
	Version int64
	// Payload is the row's jsonb; nil for a tombstone.
	Payload json.RawMessage
	// Deleted marks a tombstone.
	Deleted bool
	// Pending is set while this version is still to be exported (neither
	// synced nor failed): the third party cannot be expected to hold it.
	Pending bool
	// Synced is set when this version was accepted, so the third party
	// holds at least it.
	Synced bool
	// Failed is set when this version was rejected (failed_at): the third
	// party is not expected to hold it.
	Failed bool
}

// heldSQL reads rows and tombstones with from <= id <= to, merged in id
// order, limit of them. Each side is an index range scan on its primary
// key, so a page costs its own rows, never a scan of the table.
const heldSQL = `(SELECT id, version, payload, false, synced_at IS NULL AND failed_at IS NULL, synced_at IS NOT NULL, failed_at IS NOT NULL
		FROM resources WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT $3)
	UNION ALL
	(SELECT id, version, NULL::jsonb, true, synced_at IS NULL AND failed_at IS NULL, synced_at IS NOT NULL, failed_at IS NOT NULL
		FROM syncer_tombstones WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT $3)
	ORDER BY 1 LIMIT $3`

// HeldPage returns up to limit rows and tombstones with from <= id <= to,
// in id order: the table as it is now, read by keyset in short statements
// (`syncer verify`). An id is never both a row and a tombstone.
func HeldPage(ctx context.Context, q database.Querier, from, to int64, limit int) ([]Held, error) {
	rows, err := q.Query(ctx, heldSQL, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("resources: select held: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Held, error) {
		var h Held
		var payload []byte
		err := r.Scan(&h.ID, &h.Version, &payload, &h.Deleted, &h.Pending, &h.Synced, &h.Failed)
		if payload != nil {
			h.Payload = payload
		}
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("resources: select held: %w", err)
	}
	return out, nil
}

// Resend makes the rows and tombstones of ids pending again, each at a new
// version, and bumps the live generation so they go out under keys the
// third party has not seen (`syncer verify --heal`): the export path sends
// them, nothing here is marked synced. It returns how many it changed. Run
// it in a transaction.
func Resend(ctx context.Context, db database.Querier, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int64
	err := db.QueryRow(ctx, `WITH r AS (UPDATE resources SET version = version + 1, changed_at = now(),
				synced_at = NULL, failed_at = NULL, sync_error = NULL
			WHERE id = ANY($1) RETURNING 1),
		t AS (UPDATE syncer_tombstones SET version = version + 1, deleted_at = now(),
				synced_at = NULL, failed_at = NULL, sync_error = NULL
			WHERE id = ANY($1) RETURNING 1)
		SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM t)`, ids).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("resources: resend: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := requeued(ctx, db, ids); err != nil {
		return 0, err
	}
	return n, nil
}

// requeued bumps the live generation, so that ids' new versions go out
// under keys the third party has not seen, and forgets their digests:
// the third party was found not to hold these bodies, and a digest of one
// it accepted before would settle the new version as skipped, unsent.
func requeued(ctx context.Context, q database.Querier, ids []int64) error {
	if _, err := q.Exec(ctx, `UPDATE syncer_generation SET live = live + 1`); err != nil {
		return fmt.Errorf("resources: bump generation: %w", err)
	}
	if _, err := q.Exec(ctx, `UPDATE resources SET accepted_digest = NULL WHERE id = ANY($1::bigint[]) AND accepted_digest IS NOT NULL`, ids); err != nil {
		return fmt.Errorf("resources: forget digests: %w", err)
	}
	if _, err := q.Exec(ctx, `UPDATE syncer_tombstones SET accepted_digest = NULL WHERE id = ANY($1::bigint[]) AND accepted_digest IS NOT NULL`, ids); err != nil {
		return fmt.Errorf("resources: forget digests: %w", err)
	}
	return nil
}

// PendingOf returns those of ids whose row or tombstone is pending now:
// `syncer verify` asks it of the ids that looked drifted, since a write
// that came between its read and the third party's answer makes a key
// pending, not drifted.
func PendingOf(ctx context.Context, q database.Querier, ids []int64) ([]int64, error) {
	return idsOf(ctx, q, "pending of", `SELECT id FROM resources WHERE id = ANY($1) AND synced_at IS NULL AND failed_at IS NULL
		UNION ALL SELECT id FROM syncer_tombstones WHERE id = ANY($1) AND synced_at IS NULL AND failed_at IS NULL`, ids)
}

// idsOf returns the ids sql selects of ids (its $1); what names the read
// in its errors.
func idsOf(ctx context.Context, q database.Querier, what, sql string, ids []int64) ([]int64, error) {
	rows, err := q.Query(ctx, sql, ids)
	if err != nil {
		return nil, fmt.Errorf("resources: %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("resources: %s: %w", what, err)
	}
	return out, nil
}
