// Package replays owns syncer_replays: every statement on that table and the
// type of its states live here, so the CLI, the relay, the exporter and
// status agree on what a replay is without repeating SQL or raw strings.
//
// A replay's life: pending (created, no daemon has taken it yet), running (a
// daemon started sending it), then done or cancelled. done and cancelled are
// final: Start and Finish never leave them, and Cancel never touches a done
// replay. A replay's progress is its checkpoint (checkpoint.Replay(id)), not
// a column here: it is written with the marks, in the lock's transaction.
package replays

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	jobargs "github.com/syncer-dev/syncer/internal/jobs"

	"github.com/syncer-dev/syncer/internal/resources"
)

// State is a replay's state, as stored.
type State string

// The states of a replay.
const (
	StatePending   State = "pending"
	StateRunning   State = "running"
	StateDone      State = "done"
	StateCancelled State = "cancelled"
)

// Finished reports whether s is final: nothing more of the replay is sent.
func (s State) Finished() bool { return s == StateDone || s == StateCancelled }

// ErrNotFound means no replay has the id.
var ErrNotFound = errors.New("replays: no such replay")

// ErrFinished means the replay is already done or cancelled.
var ErrFinished = errors.New("replays: replay already finished")

// Replay is a replay's definition and state.
type Replay struct {
	ID int64
	// Source names the configured source a source replay re-exports
	// (internal/sources keeps its range and progress); empty for a replay
	// of resources, whose range is Filter.
	Source     string
	Filter     resources.Filter
	TotalRows  int64
	State      State
	CreatedAt  time.Time
	FinishedAt time.Time // zero until done or cancelled
}

// DB is what the functions need: a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// JobInserter enqueues River jobs in a transaction: a river.Client, even
// an insert-only one.
type JobInserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Enqueue records a pending replay of the rows f matches (total of them when
// counted) and enqueues a job of resources, which runs it, in tx: a replay
// never exists without a job to run it.
func Enqueue(ctx context.Context, tx pgx.Tx, jobs JobInserter, f resources.Filter, total int64) (int64, error) {
	id, err := Create(ctx, tx, f, total)
	if err != nil {
		return 0, err
	}
	if _, err := jobs.InsertTx(ctx, tx, jobargs.ExportArgs{Source: jobargs.Resources}, nil); err != nil {
		return 0, fmt.Errorf("replays: enqueue replay %d: %w", id, err)
	}
	return id, nil
}

// Create records a pending replay of the rows f matches, total of them when
// counted. The caller enqueues its job in the same transaction (Enqueue
// does both).
func Create(ctx context.Context, db DB, f resources.Filter, total int64) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, `INSERT INTO syncer_replays (from_id, to_id, since, until, failed_only, total_rows)
		VALUES (NULLIF($1, 0), NULLIF($2, 0), $3, $4, $5, $6) RETURNING id`,
		f.FromID, f.ToID, nullTime(f.Since), nullTime(f.Until), f.FailedOnly, total).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("replays: create: %w", err)
	}
	return id, nil
}

const columns = `id, from_id, to_id, since, until, failed_only, total_rows, state, created_at, finished_at, COALESCE(source, '')`

func scan(row pgx.Row) (Replay, error) {
	var r Replay
	var fromID, toID *int64
	var since, until, finished *time.Time
	var state string
	err := row.Scan(&r.ID, &fromID, &toID, &since, &until, &r.Filter.FailedOnly, &r.TotalRows, &state, &r.CreatedAt, &finished, &r.Source)
	if err != nil {
		return r, err
	}
	r.State = State(state)
	if fromID != nil {
		r.Filter.FromID = *fromID
	}
	if toID != nil {
		r.Filter.ToID = *toID
	}
	if since != nil {
		r.Filter.Since = *since
	}
	if until != nil {
		r.Filter.Until = *until
	}
	if finished != nil {
		r.FinishedAt = *finished
	}
	return r, nil
}

// Load reads a replay, or returns ErrNotFound.
func Load(ctx context.Context, db DB, id int64) (Replay, error) {
	r, err := scan(db.QueryRow(ctx, `SELECT `+columns+` FROM syncer_replays WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("replay %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("replays: load %d: %w", id, err)
	}
	return r, nil
}

// StateOf reads only a replay's state: the cheap check an exporter makes
// between batches to stop sending a cancelled replay.
func StateOf(ctx context.Context, db DB, id int64) (State, error) {
	var s string
	err := db.QueryRow(ctx, `SELECT state FROM syncer_replays WHERE id = $1`, id).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("replay %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("replays: state of %d: %w", id, err)
	}
	return State(s), nil
}

// Cancelled reports whether the replay was cancelled (or no longer exists):
// either way nothing more of it may be sent.
func Cancelled(ctx context.Context, db DB, id int64) (bool, error) {
	s, err := StateOf(ctx, db, id)
	if errors.Is(err, ErrNotFound) {
		return true, nil
	}
	return s == StateCancelled, err
}

// Start marks a pending replay running. A replay in any other state is left
// as it is, so a cancelled replay stays cancelled.
func Start(ctx context.Context, db DB, id int64) error {
	if _, err := db.Exec(ctx, `UPDATE syncer_replays SET state = $2 WHERE id = $1 AND state = $3`,
		id, StateRunning, StatePending); err != nil {
		return fmt.Errorf("replays: start %d: %w", id, err)
	}
	return nil
}

// Finish marks an unfinished replay done and reports whether it did; a
// replay cancelled meanwhile stays cancelled. The exporter calls it in the
// lock's transaction.
func Finish(ctx context.Context, db DB, id int64) (bool, error) {
	tag, err := db.Exec(ctx, `UPDATE syncer_replays SET state = $2, finished_at = now()
		WHERE id = $1 AND state IN ($3, $4)`, id, StateDone, StatePending, StateRunning)
	if err != nil {
		return false, fmt.Errorf("replays: finish %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Cancel marks an unfinished replay cancelled: no daemon sends anything more
// of it (a batch already in flight is still marked). It returns ErrNotFound
// for an unknown id and ErrFinished, with the state, for a done or already
// cancelled one.
func Cancel(ctx context.Context, db DB, id int64) error {
	// The outer SELECT sees the row as it was before the UPDATE: the
	// statement's snapshot is taken before its data-modifying CTE runs.
	var cancelled bool
	var before *string
	err := db.QueryRow(ctx, `WITH c AS (
			UPDATE syncer_replays SET state = $2, finished_at = now()
			WHERE id = $1 AND state IN ($3, $4) RETURNING id)
		SELECT EXISTS (SELECT 1 FROM c), (SELECT state FROM syncer_replays WHERE id = $1)`,
		id, StateCancelled, StatePending, StateRunning).Scan(&cancelled, &before)
	switch {
	case err != nil:
		return fmt.Errorf("replays: cancel %d: %w", id, err)
	case before == nil:
		return fmt.Errorf("replay %d: %w", id, ErrNotFound)
	case !cancelled:
		return fmt.Errorf("replay %d is %s: %w", id, *before, ErrFinished)
	}
	return nil
}

// CreateForSource records a pending replay of configured source src, total
// keys of it when counted. internal/sources records its range, and the
// source's job runs it, in the same transaction.
func CreateForSource(ctx context.Context, db DB, src string, total int64) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, `INSERT INTO syncer_replays (source, total_rows) VALUES ($1, $2) RETURNING id`, src, total).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("replays: create for source %s: %w", src, err)
	}
	return id, nil
}

// NextOfSource returns the oldest pending or running replay of source src,
// the one its job works on next; 0 when none.
func NextOfSource(ctx context.Context, db DB, src string) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, `SELECT id FROM syncer_replays WHERE source = $1 AND state IN ($2, $3) ORDER BY id LIMIT 1`,
		src, StatePending, StateRunning).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("replays: next of source %s: %w", src, err)
	}
	return id, nil
}

// Reader is what the functions that only read need: a pool, a connection
// or a transaction.
type Reader interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SourcesWaiting returns those of the configured sources names that have a
// pending or running replay: work their job has still to log.
func SourcesWaiting(ctx context.Context, db Reader, names []string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT source FROM syncer_replays WHERE source = ANY($1) AND state IN ($2, $3)`,
		names, StatePending, StateRunning)
	if err != nil {
		return nil, fmt.Errorf("replays: sources waiting: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("replays: sources waiting: %w", err)
	}
	return out, nil
}

// SourceReplays returns the ids of every replay of a configured source and,
// at the same index, the source it replays.
func SourceReplays(ctx context.Context, db Reader) (ids []int64, srcs []string, err error) {
	rows, err := db.Query(ctx, `SELECT id, source FROM syncer_replays WHERE source IS NOT NULL ORDER BY id`)
	if err != nil {
		return nil, nil, fmt.Errorf("replays: source replays: %w", err)
	}
	var id int64
	var src string
	_, err = pgx.ForEachRow(rows, []any{&id, &src}, func() error {
		ids, srcs = append(ids, id), append(srcs, src)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("replays: source replays: %w", err)
	}
	return ids, srcs, nil
}

// AnyWaiting reports whether some replay of resources is pending or
// running: the live job yields the export lock to it, and the relay's poll
// revives its job. A source's replays are its own job's. It is cheap
// enough to poll (the table is small).
func AnyWaiting(ctx context.Context, db Reader) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM syncer_replays WHERE state IN ($1, $2) AND source IS NULL)`,
		StatePending, StateRunning).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("replays: any waiting: %w", err)
	}
	return ok, nil
}

// Unfinished returns the ids of the pending and running replays of
// resources, in order: those a replay job runs.
func Unfinished(ctx context.Context, db DB) ([]int64, error) {
	rows, err := db.Query(ctx, `SELECT id FROM syncer_replays WHERE state IN ($1, $2) AND source IS NULL ORDER BY id`,
		StatePending, StateRunning)
	if err != nil {
		return nil, fmt.Errorf("replays: unfinished: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("replays: unfinished: %w", err)
	}
	return ids, nil
}

// List returns every replay, oldest first.
func List(ctx context.Context, db DB) ([]Replay, error) {
	return list(ctx, db, `SELECT `+columns+` FROM syncer_replays ORDER BY id`)
}

// Recent returns the replays worth showing: every unfinished one and the
// last finished ones (at most finished of them), sorted by id.
func Recent(ctx context.Context, db DB, finished int) ([]Replay, error) {
	return list(ctx, db, `SELECT `+columns+` FROM syncer_replays
		WHERE state IN ($1, $2)
		   OR id IN (SELECT id FROM syncer_replays WHERE state NOT IN ($1, $2) ORDER BY id DESC LIMIT $3)
		ORDER BY id`, StatePending, StateRunning, finished)
}

func list(ctx context.Context, db DB, sql string, args ...any) ([]Replay, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("replays: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Replay, error) { return scan(row) })
	if err != nil {
		return nil, fmt.Errorf("replays: list: %w", err)
	}
	return out, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Percent is the replay's progress when done rows of it were sent or
// failed; a done replay is 100 whatever it counted (rows deleted meanwhile
// are not sent).
func (r Replay) Percent(done int64) float64 {
	switch {
	case r.State == StateDone:
		return 100
	case r.TotalRows == 0:
		return 0
	}
	return min(100, float64(done)*100/float64(r.TotalRows))
}
