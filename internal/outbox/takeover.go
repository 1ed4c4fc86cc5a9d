package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/syncer-dev/syncer/internal/jobs"
)

// A takeover needs only time: when a source has work and its holder's
// lease ran out, the relay's poll of any live daemon makes sure a job of
// the source runs soon, and that job ends the holder's session
// (locks.Locker.TryAcquire). Nothing on that path may wait for the frozen
// holder or for its River client:
//
//   - the poll may not wait on a row the holder locked: a job shuts the
//     gate in a transaction on its lock's session, which has no idle
//     timeout (a transaction there may stay open across a push), so a
//     holder frozen inside it keeps the gate's row locked until the
//     takeover ends its session. The renewal of the gate's lease, which
//     runs between the polls, is bounded (gateRenewTimeout) and never
//     ends the relay, and a round waits no lock for good
//     (roundLockTimeout);
//   - a waiting job counts only if something makes it available: River's
//     scheduler does, on the leader alone, and the frozen process may be
//     the leader until its leadership runs out. So a waiting job already
//     due is made available by the poll (River's JobRetryTx), whatever
//     the leader does (ensureJobs).

// gateRenewTimeout bounds the wait of a renewal of the gate's lease for
// the gate's row: the lease is renewed every third of its TTL, so a
// renewal or two missed cost nothing.
const gateRenewTimeout = time.Second

// roundLockTimeout bounds a round's lock waits: the relay's own lock,
// which another daemon's round holds for milliseconds (a round frozen
// with it is ended by the pool sessions' idle_in_transaction timeout,
// 10 s), and anything unforeseen. A round that times out fails, is
// logged, and the next poll tries again.
const roundLockTimeout = 15 * time.Second

// overdueAfter is how long past its time a waiting job may stay scheduled
// before the poll makes it available itself. River's scheduler moves due
// jobs every 5 s on the leader, so a job later than that has none, or a
// frozen one; making one available early does what the scheduler would.
const overdueAfter = 2 * time.Second

func pgMillis(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// renewGate renews the gate's lease, waiting at most gateRenewTimeout for
// its row. A failure is said and left to the next renewal: the lease
// outlives a few.
func (r *Relay) renewGate(ctx context.Context) {
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", pgMillis(gateRenewTimeout)); err != nil {
			return err
		}
		return RenewLease(ctx, tx, r.cfg.LeaseTTL)
	})
	if err != nil && ctx.Err() == nil {
		r.logger.WarnContext(ctx, "outbox: could not renew the gate's lease (its row is locked, perhaps by a frozen holder's transaction); trying again at the next renewal",
			slog.String("error", err.Error()))
	}
}

// waitingStates are the states of a job that has not started yet and so is
// sure to look at the table after this transaction commits, once it is
// available.
var waitingStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending,
	rivertype.JobStateScheduled, rivertype.JobStateRetryable,
}

// ensureJobs makes sure a job of each source in want will look at its
// table soon after tx commits, and returns the jobs it inserted and the
// waiting ones it made available. A waiting job will (the previous
// release's job of resources too, which this release works as one), once
// available: one due for longer than overdueAfter is made available here.
// A running one may be about to end, or belong to a dead or frozen
// process, so it does not count: that is the trap of River's own
// uniqueness.
func (r *Relay) ensureJobs(ctx context.Context, tx pgx.Tx, want map[string]bool) (inserted, retried []*rivertype.JobRow, err error) {
	if len(want) == 0 {
		return nil, nil, nil
	}
	res, err := r.river.JobListTx(ctx, tx, river.NewJobListParams().
		Kinds(jobs.ExportArgs{}.Kind(), jobs.PreviousSyncArgs{}.Kind()).States(waitingStates...).First(10000))
	if err != nil {
		return nil, nil, fmt.Errorf("list jobs: %w", err)
	}
	// Per source: whether a job of it is available, else its waiting job
	// due the longest.
	covered, available := map[string]bool{}, map[string]bool{}
	due := map[string]*rivertype.JobRow{}
	var now time.Time
	for _, j := range res.Jobs {
		src, ok := jobs.SourceOfJob(j.Kind, j.EncodedArgs)
		if !ok {
			continue
		}
		if !want[src] && !covered[src] {
			continue
		}
		covered[src] = true
		delete(want, src)
		if j.State == rivertype.JobStateAvailable {
			available[src] = true
			delete(due, src)
			continue
		}
		if available[src] {
			continue
		}
		if now.IsZero() {
			if err := tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
				return nil, nil, fmt.Errorf("read the clock: %w", err)
			}
		}
		if j.ScheduledAt.Before(now.Add(-overdueAfter)) && (due[src] == nil || j.ScheduledAt.Before(due[src].ScheduledAt)) {
			due[src] = j
		}
	}
	for _, src := range slices.Sorted(maps.Keys(due)) {
		j, err := r.river.JobRetryTx(ctx, tx, due[src].ID)
		if err != nil {
			return nil, nil, fmt.Errorf("make the job of source %s available: %w", src, err)
		}
		r.logger.InfoContext(ctx, "outbox: a job of the source was overdue (no River leader moved it): made it available",
			slog.String("source", src), slog.Int64("job_id", due[src].ID), slog.Time("scheduled_at", due[src].ScheduledAt))
		retried = append(retried, j)
	}
	names := slices.Sorted(maps.Keys(want))
	for _, n := range names {
		res, err := r.river.InsertTx(ctx, tx, jobs.ExportArgs{Source: n}, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("insert a job of source %s: %w", n, err)
		}
		inserted = append(inserted, res.Job)
	}
	return inserted, retried, nil
}
