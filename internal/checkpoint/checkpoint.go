// Package checkpoint records where each export job is: the live sync and
// every replay. A checkpoint is written in the same transaction as the marks
// of the batch it describes, on the connection that holds the export lock, so
// it can never run ahead of or behind what is marked.
//
// It also records the batches in flight before they are pushed. After a crash
// the next holder of the lock sends those same rows again as the same
// batches, so the third party sees the same Idempotency-Keys and can drop the
// repeats.
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

// Checkpoint is one job's position.
type Checkpoint struct {
	Name        string
	LastID      int64
	RowsDone    int64
	BatchesDone int64
	RowsFailed  int64
	// Inflight are the batches that may have been sent and are not marked,
	// in the order they were sent.
	Inflight  []Inflight
	StartedAt time.Time
	UpdatedAt time.Time
}

// Get returns the named checkpoint; a missing one is the zero position.
func Get(ctx context.Context, db DB, name string) (Checkpoint, error) {
	cp := Checkpoint{Name: name}
	var inflight []byte
	err := db.QueryRow(ctx, `SELECT last_id, rows_done, batches_done, rows_failed, inflight, started_at, updated_at
		FROM syncer_checkpoints WHERE name = $1`, name).
		Scan(&cp.LastID, &cp.RowsDone, &cp.BatchesDone, &cp.RowsFailed, &inflight, &cp.StartedAt, &cp.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, nil
	}
	if err != nil {
		return cp, fmt.Errorf("checkpoint: get %s: %w", name, err)
	}
	if cp.Inflight, err = decode(inflight); err != nil {
		return cp, fmt.Errorf("checkpoint: get %s: batches in flight: %w", name, err)
	}
	return cp, nil
}

// Progress is what one batch adds to a checkpoint.
type Progress struct {
	LastID  int64
	Rows    int64
	Failed  int64
	Batches int64
}

// Advance records finished batches (p.Batches, at least one) and, in the
// same statement, the batches now in flight.
func Advance(ctx context.Context, db DB, name string, p Progress, inflight []Inflight) error {
	_, err := db.Exec(ctx, `INSERT INTO syncer_checkpoints AS c
			(name, last_id, rows_done, batches_done, rows_failed, inflight, inflight_batches)
		VALUES ($1, $2, $3, $6, $4, $5, $7)
		ON CONFLICT (name) DO UPDATE SET
			last_id = EXCLUDED.last_id,
			rows_done = c.rows_done + EXCLUDED.rows_done,
			batches_done = c.batches_done + EXCLUDED.batches_done,
			rows_failed = c.rows_failed + EXCLUDED.rows_failed,
			inflight = EXCLUDED.inflight,
			inflight_batches = EXCLUDED.inflight_batches,
			updated_at = now()`,
		name, p.LastID, p.Rows, p.Failed, encode(inflight), max(p.Batches, 1), len(inflight))
	if err != nil {
		return fmt.Errorf("checkpoint: advance %s: %w", name, err)
	}
	return nil
}

// SetInflight records the batches about to be pushed (nil clears them)
// without counting progress.
func SetInflight(ctx context.Context, db DB, name string, inflight []Inflight) error {
	_, err := db.Exec(ctx, `INSERT INTO syncer_checkpoints AS c (name, inflight, inflight_batches) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET inflight = EXCLUDED.inflight,
			inflight_batches = EXCLUDED.inflight_batches, updated_at = now()`, name, encode(inflight), len(inflight))
	if err != nil {
		return fmt.Errorf("checkpoint: set inflight %s: %w", name, err)
	}
	return nil
}

// List returns every checkpoint, for status.
func List(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT name, last_id, rows_done, batches_done, rows_failed, inflight_batches,
		started_at, updated_at FROM syncer_checkpoints ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) {
		var cp Checkpoint
		var inflight int
		err := r.Scan(&cp.Name, &cp.LastID, &cp.RowsDone, &cp.BatchesDone, &cp.RowsFailed, &inflight, &cp.StartedAt, &cp.UpdatedAt)
		cp.Inflight = make([]Inflight, inflight)
		return cp, err
	})
}
