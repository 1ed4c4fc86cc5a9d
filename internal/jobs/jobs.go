// Package jobs declares the River job kinds syncer enqueues, so the relay,
// the CLI and the workers agree on them without depending on each other,
// and counts them (Counts) for the gauges and status.
// Each kind carries its insert options (River's JobArgsWithInsertOpts), so
// whoever inserts one passes nil options and gets the same queue and
// attempts.
package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/migrations"
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

// SourceOfOp names the source an outbox event is for: the configured
// source its op names (migrations.SourceOp), else resources, whose
// triggers and wake-ups write every other op. With WakeOp, the one place
// an op is read or written for its source, so the relay, the commands and
// the triggers agree without a second parser.
func SourceOfOp(op string) string {
	if name, ok := strings.CutPrefix(op, migrations.SourceOpPrefix); ok {
		return name
	}
	return Resources
}

// WakeOp is the op of the event a command appends to wake source src's
// job as its triggers would (outbox.Wake): its own op for a configured
// source, RETRY for resources (whose rows a command made pending without
// changing a payload, so no trigger fired).
func WakeOp(src string) string {
	if src == Resources {
		return "RETRY"
	}
	return migrations.SourceOp(src)
}

// SourceOfJob names the source a job of syncer's exports: ExportArgs's
// source, and resources for the previous release's kinds, which this
// release works as resources' job. ok is false for another kind, or args
// that do not parse. The one reading of a job back into its source.
func SourceOfJob(kind string, encodedArgs []byte) (source string, ok bool) {
	switch kind {
	case ExportArgs{}.Kind():
		var args ExportArgs
		if json.Unmarshal(encodedArgs, &args) != nil || args.Source == "" {
			return "", false
		}
		return args.Source, true
	case PreviousSyncArgs{}.Kind(), PreviousReplayArgs{}.Kind():
		return Resources, true
	}
	return "", false
}

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
