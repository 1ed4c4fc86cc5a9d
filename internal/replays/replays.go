// Package replays owns syncer_replays and the one replay model (model.go:
// plan, start, progress, cancel) that the command line and the console
// use for every source, resources included. Every statement on that table
// and the type of its states live here, so the CLI, the console, the
// relay, the exporter and status agree on what a replay is without
// repeating SQL or raw strings.
//
// A replay's life: pending (created, no daemon has taken it yet), running (a
// daemon started sending it), then done or cancelled. done and cancelled are
// final: Start and Finish never leave them, and Cancel never touches a done
// replay. A replay's progress is its checkpoint (checkpoint.Replay(id)), not
// a column here: it is written with the marks, in the lock's transaction.
// A source replay's progress is different: its range and the cursor of the
// source's job that logs its keys are columns of its row (SourceCursor),
// while internal/sources turns them into SQL on the source's table.
package replays

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/tenant"
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
	// (its range and progress are SourcesProgress's); empty for a replay
	// of resources, whose range is Filter.
	Source     string
	Filter     resources.Filter
	TotalRows  int64
	State      State
	CreatedAt  time.Time
	FinishedAt time.Time // zero until done or cancelled
}

// Create records a pending replay of r, total rows (keys) of it when
// counted, and returns its id: the one function that writes a replay, of
// resources (r.Source empty, the form it is stored in) or of a configured
// source (r.Source its name). Plan.Start calls it and wakes the
// source's job in the same transaction; a replay created alone waits for
// the relay's next poll, which finds it (AnyWaiting, SourcesWaiting).
func Create(ctx context.Context, db database.Querier, r Request, total int64) (int64, error) {
	var id int64
	var err error
	if r.Source == "" { // resources' (Plan.Start passes it so)
		f := r.Filter
		err = db.QueryRow(ctx, `INSERT INTO syncer_replays (from_id, to_id, since, until, failed_only, total_rows)
			VALUES (NULLIF($1, 0), NULLIF($2, 0), $3, $4, $5, $6) RETURNING id`,
			f.FromID, f.ToID, nullTime(f.Since), nullTime(f.Until), f.FailedOnly, total).Scan(&id)
	} else {
		g := r.Range
		err = db.QueryRow(ctx, `INSERT INTO syncer_replays (source, total_rows, from_key, to_key, since, until, changed_column, tenant)
			VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), $5, $6, NULLIF($7, ''), NULLIF($8, '')) RETURNING id`,
			r.Source, total, g.FromKey, g.ToKey, nullTime(g.Since), nullTime(g.Until), g.ChangedColumn, g.Tenant).Scan(&id)
	}
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
	if r.Source != "" {
		// A source replay's since and until bound its changed_column:
		// its range is SourceRange's (SourcesProgress), not a Filter.
		since, until = nil, nil
	}
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
func Load(ctx context.Context, db database.Querier, id int64) (Replay, error) {
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
func StateOf(ctx context.Context, db database.Querier, id int64) (State, error) {
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
func Cancelled(ctx context.Context, db database.Querier, id int64) (bool, error) {
	s, err := StateOf(ctx, db, id)
	if errors.Is(err, ErrNotFound) {
		return true, nil
	}
	return s == StateCancelled, err
}

// Start marks a pending replay running. A replay in any other state is left
// as it is, so a cancelled replay stays cancelled.
func Start(ctx context.Context, db database.Querier, id int64) error {
	if _, err := db.Exec(ctx, `UPDATE syncer_replays SET state = $2 WHERE id = $1 AND state = $3`,
		id, StateRunning, StatePending); err != nil {
		return fmt.Errorf("replays: start %d: %w", id, err)
	}
	return nil
}

// Finish marks an unfinished replay done and reports whether it did; a
// replay cancelled meanwhile stays cancelled. The exporter calls it in the
// lock's transaction.
func Finish(ctx context.Context, db database.Querier, id int64) (bool, error) {
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
func Cancel(ctx context.Context, db database.Querier, id int64) error {
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

// SourceRange selects the rows of a configured source that a source replay
// exports once more. Its zero value is the whole table. internal/sources
// checks it against the source (ReplayRange is this type) and turns it
// into SQL on the source's table; here it is only stored.
type SourceRange struct {
	// FromKey and ToKey bound the key, inclusive, in its text form; empty
	// is unbounded. Integer keys compare as numbers, text and uuid keys in
	// byte order.
	FromKey, ToKey string
	// Since (inclusive) and Until (exclusive) bound the time of a row's
	// last change, read from ChangedColumn; zero is unbounded.
	Since, Until time.Time
	// ChangedColumn is the table's column that holds the time of a row's
	// last change (the source's changed_at); required with Since or Until.
	ChangedColumn string
	// Tenant bounds the rows to one tenant's, in the tenant column's text
	// form, for a source with a tenant column; the zero Tenant is every
	// tenant.
	Tenant tenant.Tenant
}

// SourceCursor is a source replay's range and where its logging stands,
// as the source's job reads it before logging the next chunk.
type SourceCursor struct {
	ID    int64
	State State
	Range SourceRange
	// AfterKey is the last key logged, in its text form: the next chunk
	// starts after it. nil until the first chunk logged a key.
	AfterKey *string
}

// LockSourceCursor reads source replay id's cursor and locks its row until
// tx ends, so that two daemons never log the same chunk; the caller moves
// the cursor (AdvanceSourceCursor) in the same transaction. It does not
// wait: a row another transaction holds is an error whose cause is
// PostgreSQL's lock_not_available (55P03), which the caller retries later.
// A replay cancelled since the caller chose it comes back with its final
// State, for the caller to skip. ErrNotFound means no source replay has
// the id.
func LockSourceCursor(ctx context.Context, tx pgx.Tx, id int64) (SourceCursor, error) {
	// FOR NO KEY UPDATE is the lock the cursor's UPDATE takes anyway: it
	// excludes another chunk and leaves foreign key checks alone.
	c := SourceCursor{ID: id}
	var state string
	var since, until *time.Time
	err := tx.QueryRow(ctx, `SELECT state, COALESCE(from_key, ''), COALESCE(to_key, ''), since, until,
			COALESCE(changed_column, ''), after_key, COALESCE(tenant, '')
		FROM syncer_replays WHERE id = $1 AND source IS NOT NULL FOR NO KEY UPDATE NOWAIT`, id).
		Scan(&state, &c.Range.FromKey, &c.Range.ToKey, &since, &until, &c.Range.ChangedColumn, &c.AfterKey, &c.Range.Tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("source replay %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("replays: lock source cursor %d: %w", id, err)
	}
	c.State = State(state)
	c.Range.Since, c.Range.Until = derefTime(since), derefTime(until)
	return c, nil
}

// AdvanceSourceCursor records a chunk of source replay id: logged keys
// queued, the last of them lastKey (nil when the chunk logged none: the
// cursor stays), the highest change logged lastSeq. The caller holds the
// row (LockSourceCursor) and logs the keys in the same transaction.
func AdvanceSourceCursor(ctx context.Context, tx pgx.Tx, id int64, lastKey *string, logged, lastSeq int64) error {
	if _, err := tx.Exec(ctx, `UPDATE syncer_replays SET after_key = COALESCE($2, after_key),
			keys_logged = keys_logged + $3, last_seq = GREATEST(last_seq, $4) WHERE id = $1`,
		id, lastKey, logged, lastSeq); err != nil {
		return fmt.Errorf("replays: advance source cursor %d: %w", id, err)
	}
	return nil
}

// SourceProgress is a source replay's range and how far its logging went.
type SourceProgress struct {
	ID     int64
	Source string
	Range  SourceRange
	// KeysLogged counts the keys the replay queued for export so far.
	KeysLogged int64
	// LastSeq is the highest change the replay logged, 0 before its first:
	// its keys are all sent once the source has no change up to it left.
	LastSeq int64
}

// SourcesProgress returns the range and progress of every replay of a
// configured source, by id.
func SourcesProgress(ctx context.Context, db database.Querier) ([]SourceProgress, error) {
	rows, err := db.Query(ctx, `SELECT id, source, COALESCE(from_key, ''), COALESCE(to_key, ''), since, until,
			COALESCE(changed_column, ''), keys_logged, last_seq, COALESCE(tenant, '')
		FROM syncer_replays WHERE source IS NOT NULL ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("replays: sources progress: %w", err)
	}
	var out []SourceProgress
	var p SourceProgress
	var since, until *time.Time
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.Source, &p.Range.FromKey, &p.Range.ToKey, &since, &until,
		&p.Range.ChangedColumn, &p.KeysLogged, &p.LastSeq, &p.Range.Tenant}, func() error {
		p.Range.Since, p.Range.Until = derefTime(since), derefTime(until)
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("replays: sources progress: %w", err)
	}
	return out, nil
}

// NextOfSource returns the oldest pending or running replay of source src,
// the one its job works on next; 0 when none.
func NextOfSource(ctx context.Context, db database.Querier, src string) (int64, error) {
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

// SourcesWaiting returns those of the configured sources names that have a
// pending or running replay: work their job has still to log.
func SourcesWaiting(ctx context.Context, db database.Querier, names []string) ([]string, error) {
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

// AnyWaiting reports whether some replay of resources is pending or
// running: resources' job runs it between its live passes, and the relay's
// poll counts it as work. A source's replays are its own job's. It is
// cheap enough to poll (the table is small).
func AnyWaiting(ctx context.Context, db database.Querier) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM syncer_replays WHERE state IN ($1, $2) AND source IS NULL)`,
		StatePending, StateRunning).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("replays: any waiting: %w", err)
	}
	return ok, nil
}

// Unfinished returns the ids of the pending and running replays of
// resources, in order: those resources' job runs.
func Unfinished(ctx context.Context, db database.Querier) ([]int64, error) {
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
func List(ctx context.Context, db database.Querier) ([]Replay, error) {
	return list(ctx, db, `SELECT `+columns+` FROM syncer_replays ORDER BY id`)
}

// Recent returns the replays worth showing: every unfinished one and the
// last finished ones (at most finished of them), sorted by id.
func Recent(ctx context.Context, db database.Querier, finished int) ([]Replay, error) {
	return list(ctx, db, `SELECT `+columns+` FROM syncer_replays
		WHERE state IN ($1, $2)
		   OR id IN (SELECT id FROM syncer_replays WHERE state NOT IN ($1, $2) ORDER BY id DESC LIMIT $3)
		ORDER BY id`, StatePending, StateRunning, finished)
}

func list(ctx context.Context, db database.Querier, sql string, args ...any) ([]Replay, error) {
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

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
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
