// Package jobs declares the River job kinds syncer enqueues, so the relay,
// the CLI and the workers agree on them without depending on each other,
// and counts them (Counts) for the gauges and status.
// Each kind carries its insert options (River's JobArgsWithInsertOpts), so
// whoever inserts one passes nil options and gets the same queue and
// attempts.
package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/database"
)

// Queue is the River queue syncer's jobs run on.
const Queue = "syncer"

// MaxAttempts is how many attempts River gives one of syncer's jobs.
// Expected conditions (a busy lock, an open breaker, a 429) snooze, which
// costs no attempt; attempts count only unexpected errors, such as a
// database restart, which a job must outlive.
const MaxAttempts = 1000

// insertOpts are the options every kind inserts with.
func insertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: MaxAttempts}
}

// ExportArgs exports one source: its pending rows, its snapshot and its
// replays. The one job kind of every source, resources (Resources) and
// each configured source alike; the relay sees that one waits per source
// at a time, and what it exports is read from the source's tables when it
// runs, never carried in the job. Its River kind is the one the previous
// release gave a configured source's job: a daemon of that release that
// fetches the job of a source it does not export (resources among them)
// completes it as a no-op, and the relay's poll brings another.
type ExportArgs struct {
	Source string `json:"source"`
}

// Resources is the name of the source that is the resources table of
// docs/protocol.md section 1, with its built-in triggers.
const Resources = "resources"

// Kind is River's name for the job.
func (ExportArgs) Kind() string { return "syncer_source" }

// InsertOpts puts the job on syncer's queue.
func (ExportArgs) InsertOpts() river.InsertOpts { return insertOpts() }

// PreviousSyncArgs and PreviousReplayArgs are the jobs the previous
// release enqueued for resources' live sync and for each of its replays.
// This release inserts none; it works those a daemon of that release left
// or still enqueues during a rolling upgrade, as resources' ExportArgs.
// A release after the next drops them.
type (
	PreviousSyncArgs   struct{}
	PreviousReplayArgs struct {
		ReplayID int64 `json:"replay_id"`
	}
)

// Kind is River's name for the job.
func (PreviousSyncArgs) Kind() string { return "syncer_sync" }

// Kind is River's name for the job.
func (PreviousReplayArgs) Kind() string { return "syncer_replay" }

var _ river.JobArgsWithInsertOpts = ExportArgs{}

// Kinds are syncer's job kinds, the previous release's among them.
func Kinds() []string {
	return []string{ExportArgs{}.Kind(), PreviousSyncArgs{}.Kind(), PreviousReplayArgs{}.Kind()}
}

// Count is how many of syncer's jobs of one kind are in one state.
type Count struct {
	Kind, State string
	N           int64
}

// Counts counts syncer's jobs by kind and state, every state included:
// the one reading of river_job that the gauges and status share.
func Counts(ctx context.Context, q database.Querier) ([]Count, error) {
	rows, err := q.Query(ctx, `SELECT kind, state::text, count(*) FROM river_job
		WHERE kind = ANY($1) GROUP BY kind, state ORDER BY kind, state`, Kinds())
	if err != nil {
		return nil, fmt.Errorf("jobs: count: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Count])
	if err != nil {
		return nil, fmt.Errorf("jobs: count: %w", err)
	}
	return out, nil
}
