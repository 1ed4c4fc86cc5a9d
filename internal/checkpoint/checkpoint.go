// Package checkpoint records where each export job is: the live sync and
// every replay. A checkpoint is written in the same transaction as the marks
// of the batch it describes, on the connection that holds the export lock, so
// it can never run ahead of or behind what is marked.
//
// It also records the batch in flight before it is pushed. After a crash the
// next holder of the lock sends those same rows again as the same batch, so
// the third party sees the same Idempotency-Key and can drop the repeat.
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Live is the checkpoint name of the live sync.
const Live = "live"

// Replay returns the checkpoint name of a replay.
func Replay(id int64) string { return fmt.Sprintf("replay:%d", id) }

// DB is a connection or transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Inflight is a batch recorded before its push.
type Inflight struct {
	Key string
	// Salt derived Key, and derives the keys of the batch's halves if the
	// third party makes it split.
	Salt     string
	IDs      []int64
	Versions []int64
}

// columns returns the nullable column values of an inflight record.
func (in *Inflight) columns() (key, salt *string, ids, versions []int64) {
	if in == nil {
		return nil, nil, nil, nil
	}
	return &in.Key, &in.Salt, in.IDs, in.Versions
}

// Checkpoint is one job's position.
type Checkpoint struct {
	Name        string
	LastID      int64
	RowsDone    int64
	BatchesDone int64
	RowsFailed  int64
	Inflight    *Inflight
	StartedAt   time.Time
	UpdatedAt   time.Time
}

// Get returns the named checkpoint; a missing one is the zero position.
func Get(ctx context.Context, db DB, name string) (Checkpoint, error) {
	cp := Checkpoint{Name: name}
	var key, salt *string
	var ids, versions []int64
	err := db.QueryRow(ctx, `SELECT last_id, rows_done, batches_done, rows_failed,
			inflight_key, inflight_salt, inflight_ids, inflight_versions, started_at, updated_at
		FROM syncer_checkpoints WHERE name = $1`, name).
		Scan(&cp.LastID, &cp.RowsDone, &cp.BatchesDone, &cp.RowsFailed, &key, &salt, &ids, &versions, &cp.StartedAt, &cp.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, nil
	}
	if err != nil {
		return cp, fmt.Errorf("checkpoint: get %s: %w", name, err)
	}
	if key != nil {
		cp.Inflight = &Inflight{Key: *key, IDs: ids, Versions: versions}
		if salt != nil {
			cp.Inflight.Salt = *salt
		}
	}
	return cp, nil
}

// Progress is what one batch adds to a checkpoint.
type Progress struct {
	LastID int64
	Rows   int64
	Failed int64
}

// Advance records a finished batch and, in the same statement, the next
// batch in flight (nil when none).
func Advance(ctx context.Context, db DB, name string, p Progress, next *Inflight) error {
	key, salt, ids, versions := next.columns()
	_, err := db.Exec(ctx, `INSERT INTO syncer_checkpoints AS c
			(name, last_id, rows_done, batches_done, rows_failed, inflight_key, inflight_salt, inflight_ids, inflight_versions)
		VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8)
		ON CONFLICT (name) DO UPDATE SET
			last_id = EXCLUDED.last_id,
			rows_done = c.rows_done + EXCLUDED.rows_done,
			batches_done = c.batches_done + 1,
			rows_failed = c.rows_failed + EXCLUDED.rows_failed,
			inflight_key = EXCLUDED.inflight_key,
			inflight_salt = EXCLUDED.inflight_salt,
			inflight_ids = EXCLUDED.inflight_ids,
			inflight_versions = EXCLUDED.inflight_versions,
			updated_at = now()`,
		name, p.LastID, p.Rows, p.Failed, key, salt, ids, versions)
	if err != nil {
		return fmt.Errorf("checkpoint: advance %s: %w", name, err)
	}
	return nil
}

// SetInflight records the batch about to be pushed (nil clears it) without
// counting progress.
func SetInflight(ctx context.Context, db DB, name string, next *Inflight) error {
	key, salt, ids, versions := next.columns()
	_, err := db.Exec(ctx, `INSERT INTO syncer_checkpoints AS c (name, inflight_key, inflight_salt, inflight_ids, inflight_versions)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO UPDATE SET inflight_key = EXCLUDED.inflight_key,
			inflight_salt = EXCLUDED.inflight_salt,
			inflight_ids = EXCLUDED.inflight_ids, inflight_versions = EXCLUDED.inflight_versions,
			updated_at = now()`, name, key, salt, ids, versions)
	if err != nil {
		return fmt.Errorf("checkpoint: set inflight %s: %w", name, err)
	}
	return nil
}

// List returns every checkpoint, for status.
func List(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT name, last_id, rows_done, batches_done, rows_failed, inflight_key IS NOT NULL,
		started_at, updated_at FROM syncer_checkpoints ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) {
		var cp Checkpoint
		var inflight bool
		err := r.Scan(&cp.Name, &cp.LastID, &cp.RowsDone, &cp.BatchesDone, &cp.RowsFailed, &inflight, &cp.StartedAt, &cp.UpdatedAt)
		if inflight {
			cp.Inflight = &Inflight{}
		}
		return cp, err
	})
}
