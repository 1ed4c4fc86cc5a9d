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

// SyncArgs is the live sync: export every pending row. Only one is pending at
// a time (the relay sees to that); the rows it exports are read from the
// table when it runs, never carried in the job.
type SyncArgs struct{}

// Kind is River's name for the job.
func (SyncArgs) Kind() string { return "syncer_sync" }

// InsertOpts puts the job on syncer's queue.
func (SyncArgs) InsertOpts() river.InsertOpts { return insertOpts() }

// ReplayArgs re-exports the rows of one replay, whose definition and progress
// live in syncer_replays and syncer_checkpoints.
type ReplayArgs struct {
	ReplayID int64 `json:"replay_id"`
}

// Kind is River's name for the job.
func (ReplayArgs) Kind() string { return "syncer_replay" }

// InsertOpts puts the job on syncer's queue.
func (ReplayArgs) InsertOpts() river.InsertOpts { return insertOpts() }

// SourceArgs exports the pending keys (and the snapshot) of one configured
// source (SYNCER_CONFIG). Only one waits per source at a time (the relay
// sees to that); the keys are read from the source's change log when it
// runs.
type SourceArgs struct {
	Source string `json:"source"`
}

// Kind is River's name for the job.
func (SourceArgs) Kind() string { return "syncer_source" }

// InsertOpts puts the job on syncer's queue.
func (SourceArgs) InsertOpts() river.InsertOpts { return insertOpts() }

var (
	_ river.JobArgsWithInsertOpts = SyncArgs{}
	_ river.JobArgsWithInsertOpts = ReplayArgs{}
	_ river.JobArgsWithInsertOpts = SourceArgs{}
)

// Kinds are syncer's job kinds.
func Kinds() []string { return []string{SyncArgs{}.Kind(), ReplayArgs{}.Kind(), SourceArgs{}.Kind()} }

// Querier is what Counts needs: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Count is how many of syncer's jobs of one kind are in one state.
type Count struct {
	Kind, State string
	N           int64
}

// Counts counts syncer's jobs by kind and state, every state included:
// the one reading of river_job that the gauges and status share.
func Counts(ctx context.Context, q Querier) ([]Count, error) {
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
