// Package jobs declares the River job kinds syncer enqueues, so the relay,
// the CLI and the workers agree on them without depending on each other.
package jobs

// SyncArgs is the live sync: export every pending row. Only one is pending at
// a time (the relay sees to that); the rows it exports are read from the
// table when it runs, never carried in the job.
type SyncArgs struct{}

// Kind is River's name for the job.
func (SyncArgs) Kind() string { return "syncer_sync" }

// ReplayArgs re-exports the rows of one replay, whose definition and progress
// live in syncer_replays and syncer_checkpoints.
type ReplayArgs struct {
	ReplayID int64 `json:"replay_id"`
}

// Kind is River's name for the job.
func (ReplayArgs) Kind() string { return "syncer_replay" }

// Queue is the River queue syncer's jobs run on.
const Queue = "syncer"
