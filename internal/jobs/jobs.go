// Package jobs declares the River job kinds syncer enqueues, so the relay,
// the CLI and the workers agree on them without depending on each other.
// Each kind carries its insert options (River's JobArgsWithInsertOpts), so
// whoever inserts one passes nil options and gets the same queue and
// attempts.
package jobs

import "github.com/riverqueue/river"

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
