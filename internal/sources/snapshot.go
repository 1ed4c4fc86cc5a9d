package sources

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/database"
)

// SnapshotLockTimeout bounds how long a snapshot chunk waits for a row
// that a writer holds: past it the chunk gives up (ErrSnapshotBusy) rather
// than keep the share locks it already took, which writers of those rows
// would wait on. It is well below PostgreSQL's deadlock_timeout (1 s by
// default): a writer's multi-row UPDATE that waits for a row the chunk
// holds while the chunk waits for one of the writer's is a deadlock, and
// the detector cancels whichever waiter looks first once deadlock_timeout
// has passed. At 1 s the writer, which started waiting first, was
// cancelled ("deadlock detected" in the application, found by
// TestCompositeFilteredSIGKILLMidDrain); the chunk now gives up first.
const SnapshotLockTimeout = 200 * time.Millisecond

// ErrSnapshotBusy means a snapshot chunk logged nothing because a row, or
// the source's snapshot itself (another daemon's chunk), was locked. Try
// again later.
var ErrSnapshotBusy = errors.New("sources: snapshot chunk waited too long for a lock")

// Snapshot logs the next chunk of src's snapshot, then, once the snapshot
// is done or skipped, of its replays (replay --source), oldest first, and
// reports whether both are done: the source's job calls it until they are.
func Snapshot(ctx context.Context, db database.DB, src *Source, chunk int) (done bool, err error) {
	if chunk <= 0 {
		return false, fmt.Errorf("sources: source %s: snapshot chunk must be positive, got %d", src.Name, chunk)
	}
	if done, err = snapshotChunk(ctx, db, src, chunk); err != nil || !done {
		return done, err
	}
	return replayChunk(ctx, db, src, chunk)
}

// snapshotChunk logs a change for the next chunk rows of src's table that
// existed before the source was installed, in key order, from the cursor
// kept in syncer_sources, and reports whether the snapshot is done. Each
// call is one short transaction: it takes a share lock on the chunk's rows
// only (writers of other rows never wait, writers of these wait for the
// chunk's commit), and advances the cursor in the same transaction, so a
// snapshot resumes where it stopped after a crash or on another daemon.
// Rows the triggers already logged are logged again: the key goes out at
// its highest version, once or twice, never out of order. A source whose
// snapshot is done or skipped returns true at once.
func snapshotChunk(ctx context.Context, db database.DB, src *Source, chunk int) (done bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", SnapshotLockTimeout.Milliseconds())); err != nil {
			return err
		}
		var state SnapshotState
		var after *string
		err := tx.QueryRow(ctx, `SELECT snapshot_state, snapshot_after FROM syncer_sources WHERE name = $1 FOR UPDATE NOWAIT`, src.Name).
			Scan(&state, &after)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("sources: source %s: %w", src.Name, ErrNotInstalled)
		}
		if err != nil {
			return err
		}
		if state == SnapshotDone || state == SnapshotSkipped {
			done = true
			return nil
		}
		var total *int64
		if state == SnapshotPending {
			// An estimate, from the statistics: counting would scan the
			// table.
			var est int64
			// A partitioned table's rows are counted in its partitions.
			if err := tx.QueryRow(ctx, `SELECT GREATEST(COALESCE(
					(SELECT sum(GREATEST(c.reltuples, 0)) FROM pg_partition_tree(to_regclass($1)) p
						JOIN pg_class c ON c.oid = p.relid WHERE p.isleaf),
					(SELECT reltuples FROM pg_class WHERE oid = to_regclass($1))), 0)::bigint`,
				src.table()).Scan(&est); err != nil {
				return err
			}
			total = &est
		}
		var n, seq int64
		var last *string
		if after == nil {
			err = tx.QueryRow(ctx, src.sql.snapshotFirst, src.Name, chunk).Scan(&n, &last, &seq)
		} else {
			err = tx.QueryRow(ctx, src.sql.snapshotAfter, src.Name, chunk, *after).Scan(&n, &last, &seq)
		}
		if err != nil {
			return err
		}
		done = n < int64(chunk)
		next := SnapshotRunning
		if done {
			next = SnapshotDone
		}
		_, err = tx.Exec(ctx, `UPDATE syncer_sources SET snapshot_state = $2,
				snapshot_after = COALESCE($3, snapshot_after),
				snapshot_rows = snapshot_rows + $4,
				snapshot_total = CASE WHEN $5 THEN snapshot_rows + $4 ELSE COALESCE($6, snapshot_total) END,
				snapshot_started_at = COALESCE(snapshot_started_at, now()),
				snapshot_done_at = CASE WHEN $5 THEN now() END
			WHERE name = $1`, src.Name, next, last, n, done, total)
		return err
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return false, ErrSnapshotBusy
		}
		if errors.Is(err, ErrNotInstalled) {
			return false, err
		}
		return false, src.explain(ctx, db, fmt.Errorf("sources: source %s: snapshot: %w", src.Name, err))
	}
	return done, nil
}

// Resnapshot starts the source's snapshot over, so that every row of its
// table is logged, and exported, once more: a replay of the whole source.
// It reports whether the source exists. Rows are read again from the table
// as they are then; their versions go on above every version sent.
func Resnapshot(ctx context.Context, e database.Querier, src string) (bool, error) {
	tag, err := e.Exec(ctx, `UPDATE syncer_sources SET snapshot_state = 'pending', snapshot_after = NULL,
			snapshot_rows = 0, snapshot_total = 0, snapshot_started_at = NULL, snapshot_done_at = NULL, updated_at = now()
		WHERE name = $1`, src)
	if err != nil {
		return false, fmt.Errorf("sources: source %s: resnapshot: %w", src, err)
	}
	return tag.RowsAffected() == 1, nil
}
