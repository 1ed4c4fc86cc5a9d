package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Defaults of a job's waits.
const (
	SchemaChangedSnoozeDefault  = time.Minute
	sourceSnapshotBusySnoozeMin = 100 * time.Millisecond
)

// Worker is the one River worker: a job exports one source, resources or
// a configured one (jobs.ExportArgs).
type Worker struct {
	river.WorkerDefaults[jobs.ExportArgs]
	e *Exporter
}

// Worker returns the River worker of every source.
func (e *Exporter) Worker() *Worker { return &Worker{e: e} }

// Timeout disables River's job timeout: executions bound themselves by
// Config.MaxRun, and a timeout would cancel a push that must be marked.
func (w *Worker) Timeout(*river.Job[jobs.ExportArgs]) time.Duration { return -1 }

// Work exports the job's source: see work, run as reload.go says.
func (w *Worker) Work(ctx context.Context, job *river.Job[jobs.ExportArgs]) error {
	return w.e.supervised(ctx, job.Args.Source, w.e.shares.atStart(ctx, job.Args.Source, job.CreatedAt))
}

// PreviousWorker works the jobs the previous release enqueued for
// resources (jobs.PreviousSyncArgs, jobs.PreviousReplayArgs) as a job of
// resources: its replays are resources' and run in its job. Registered
// for one release, for a rolling upgrade.
type PreviousWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	e *Exporter
}

// PreviousSyncWorker and PreviousReplayWorker return the workers of the
// previous release's jobs.
func (e *Exporter) PreviousSyncWorker() *PreviousWorker[jobs.PreviousSyncArgs] {
	return &PreviousWorker[jobs.PreviousSyncArgs]{e: e}
}

// PreviousReplayWorker: see PreviousSyncWorker.
func (e *Exporter) PreviousReplayWorker() *PreviousWorker[jobs.PreviousReplayArgs] {
	return &PreviousWorker[jobs.PreviousReplayArgs]{e: e}
}

// Timeout: see Worker.Timeout.
func (w *PreviousWorker[T]) Timeout(*river.Job[T]) time.Duration { return -1 }

// Work exports resources.
func (w *PreviousWorker[T]) Work(ctx context.Context, _ *river.Job[T]) error {
	return w.e.supervised(ctx, jobs.Resources, 0)
}

// run is one execution of a source's job under its lock.
type run struct {
	s  exported
	lk *locks.Lock
	// t is the job's turn at its destination's lock (turns.go).
	t       *turn
	started time.Time
	// carried is what the job's last pass left unmarked.
	carried carried
}

// carried are the batches a job's poll sent, had answered and left
// recorded and unmarked when it ended: the job's next pass writes their
// outcomes in the transaction that records its own first batch (and
// reads past their items), so a look costs one transaction where it
// cost two (docs/design.md, "A look's outcomes wait for the next look").
// A crash meanwhile loses nothing: recorded, they are resent under their
// keys with their bodies, as any batch answered and not marked is.
type carried struct {
	// on lets the pass under way leave its answered batches here.
	on bool
	// t is the target whose pass left them: a pass of another feed
	// writes them first, alone (flushCarried).
	t       target
	batches []*batch
}

// flushCarried writes the outcomes of the batches r's last pass left. The
// job's end calls it, cancelled or not: what the third party answered is
// written while the lock is held.
func (e *Exporter) flushCarried(ctx context.Context, r *run) error {
	if len(r.carried.batches) == 0 {
		return nil
	}
	p := r.carried.t.pipeline(e, r.lk)
	p.carried, r.carried.batches = r.carried.batches, nil
	return p.run(context.WithoutCancel(ctx), nil, nil, nil)
}

// work takes the source's lock (busy: snooze, never wait), resends its
// recorded batches, drains it and lingers. A source whose table no longer
// matches its configuration stops with a loud error and snoozes long; the
// other sources go on.
func (e *Exporter) work(ctx context.Context, name string) error {
	s, ok := e.sourcesNow()[name]
	if !ok {
		// Not exported here (another daemon's configuration, or
		// removed): nothing to do, and no retry.
		e.logger.DebugContext(ctx, "exporter: source not exported by this daemon", slog.String("source", name))
		return nil
	}
	// Notifications from now on go to this job, not into more jobs. A
	// lane's job that finds its daemon running its share of the lanes
	// leaves the lane to another daemon's River.
	a, over := e.shares.awakenWithin(name, jobOf(ctx).laneShare())
	if over {
		return river.JobSnooze(shareSnooze())
	}
	defer a.end()
	// A table dropped or renamed, or its triggers gone, sends no change:
	// only looking finds it.
	err := s.check(ctx)
	if err == nil {
		err = e.export(ctx, s, a)
	}
	if errors.Is(err, locks.ErrLockBusy) && a.end() {
		// Another job of the source is active here (it lingers, or will
		// find the lock busy too and see to it): it takes the work.
		return nil
	}
	s.ended(ctx, e, err)
	switch {
	case errors.Is(err, sources.ErrSchemaChanged):
		return river.JobSnooze(SchemaChangedSnoozeDefault)
	case errors.Is(err, sources.ErrSnapshotBusy):
		return river.JobSnooze(max(e.cfg.LockBusySnooze, sourceSnapshotBusySnoozeMin))
	}
	return e.jobResult(ctx, err)
}

// export runs one execution of s's job under its lock and its
// destination's turn.
func (e *Exporter) export(ctx context.Context, s exported, a *awake) error {
	b := s.base()
	lk, err := e.acquire(ctx, b.Name())
	if err != nil {
		return err
	}
	defer e.release(ctx, lk, b.Name())
	started, total := e.now(), 0
	defer func() {
		// The key of this run's own last batch: other lanes of the
		// source (other tenants) push meanwhile under their own locks.
		key := e.lastKeys.take(lk)
		if total > 0 {
			e.logger.InfoContext(ctx, "exporter: source run", slog.String("source", b.Name()), slog.Int("rows", total),
				slog.Duration("took", e.since(started)), slog.String("last_idempotency_key", key))
		}
	}()
	lctx, cancel := lk.Context(ctx)
	defer cancel()
	// The destination's limits are kept by this process's deliverer: while
	// it pushes, no other daemon may push to the same destination (a source
	// of the same destination on another daemon snoozes, never waits).
	// This process's jobs of one destination take turns (turns.go).
	t := e.newTurn(lctx, b)
	defer t.done(ctx)
	if err := t.firstTake(lctx, e.cfg.PassLength+e.cfg.HotLinger); err != nil {
		return lockCause(lk, err)
	}
	r := &run{s: s, lk: lk, t: t, started: e.now()}
	dctx, err := t.take(lctx)
	if err != nil {
		return lockCause(lk, err)
	}
	if err := e.resume(dctx, lk, s.live(), s.owns); err != nil {
		return lockCause(lk, t.cause(err))
	}
	drain, poll := s.drain(e, r)
	seen := 0
	total, err = e.linger(lctx, &lingerFeed{
		name: b.Name(), awake: a, lk: lk, started: r.started,
		drain: drain, poll: poll,
		// Gone cold, the job holds no turn: another source of the
		// destination pushes while this one waits for a notification.
		cold:   func(ctx context.Context) { t.done(ctx) },
		settle: func(ctx context.Context) error { return e.flushCarried(ctx, r) },
		yield: func(ctx context.Context) (bool, error) {
			if t.free {
				// A lane ends after its run limit, so that its job goes
				// back to River and any daemon may take it: lanes spread
				// over the running daemons rather than stay with the
				// first that took them. A daemon over its share gives
				// lanes up sooner (share.go).
				if e.since(r.started) > e.cfg.MaxRun {
					return true, nil
				}
				if e.shares.leaveForShare(ctx, b.Name(), r.started) {
					return true, errShare
				}
				return false, nil
			}
			// Seen at yieldChecks checks in a row, about a second: a job
			// of it that is only being fetched lingers here by then.
			waiting, err := e.othersWait(ctx, b)
			if !waiting {
				seen = 0
			} else if seen++; seen >= yieldChecks {
				return true, err
			}
			return false, err
		},
	})
	if ferr := e.flushCarried(ctx, r); ferr != nil && err == nil {
		err = fmt.Errorf("exporter: write the last look's outcomes: %w", ferr)
	}
	return lockCause(lk, err)
}

// yieldChecks is how many checks in a row (yieldCheckEvery apart) a
// lingering job finds another source of its destination waiting before it
// ends for it.
const yieldChecks = 5

// pass makes one pass over t's feed after startAfter in the job's turn
// at its destination, and gives the turn to a job here that waits for it.
// ok is false when the turn is another job's: nothing was read.
//
// With carry, the pass may leave its last answered batches unmarked for
// the job's next pass (a poll's: the next look is due within HotPoll).
func (e *Exporter) turnPass(ctx context.Context, r *run, t target, startAfter int64, maxBatches int, until time.Time, carry bool) (res passResult, ok bool, err error) {
	if len(r.carried.batches) > 0 && r.carried.t.feed.Checkpoint() != t.feed.Checkpoint() {
		if err := e.flushCarried(ctx, r); err != nil {
			return res, false, err
		}
	}
	dctx, err := r.t.take(ctx)
	if errors.Is(err, locks.ErrLockBusy) {
		return res, false, nil
	}
	if err != nil {
		return res, false, err
	}
	r.carried.on, r.carried.t = carry, t
	res, err = e.carryingPass(dctx, r.lk, t, startAfter, maxBatches, until, &r.carried)
	err = r.t.cause(err)
	r.t.handOver(ctx)
	return res, true, err
}

// errMore means the job has work left and should run again at once.
var errMore = errors.New("exporter: more work")

// retryAfter is an error that knows when to try again.
type retryAfter interface{ RetryAfter() time.Duration }

// quiet is a wait already logged where it began (delivery's person's
// pause): a job that snoozes on it logs at debug, not every few seconds.
type quiet interface {
	error
	Quiet() bool
}

// jobResult turns the outcome of an execution into what River should do.
// Expected conditions become snoozes, which cost no attempt; only unexpected
// errors go through River's retry policy.
func (e *Exporter) jobResult(ctx context.Context, err error) error {
	var ra retryAfter
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errShare):
		return river.JobSnooze(shareSnooze())
	case errors.Is(err, errMore), errors.Is(err, errStopping):
		return river.JobSnooze(0)
	case errors.Is(err, locks.ErrLockBusy):
		return river.JobSnooze(e.cfg.LockBusySnooze)
	case errors.Is(err, locks.ErrLockLost):
		e.logger.WarnContext(ctx, "exporter: export lock lost; stopped pushing, marked nothing more", slog.String("error", err.Error()))
		return river.JobSnooze(e.cfg.LockBusySnooze)
	case errors.As(err, &ra):
		// Parked for at most MaxSnooze: the pause itself is shared state
		// that the next run reads again, so a restart, another daemon or a
		// shorter pause is never stuck behind a job parked for hours.
		wait := min(max(ra.RetryAfter(), 0), e.cfg.MaxSnooze)
		level := slog.LevelWarn
		var q quiet
		if errors.As(err, &q) && q.Quiet() {
			level = slog.LevelDebug // a person's pause: the deliverer said it once
		}
		e.logger.Log(ctx, level, "exporter: pausing", slog.String("error", err.Error()),
			slog.Duration("retry_in", ra.RetryAfter()), slog.Duration("next_look_in", wait))
		return river.JobSnooze(wait)
	case ctx.Err() != nil:
		// Cancelled by the shutdown timeout: the batch in flight was
		// abandoned unmarked and is recorded, so the next run resends it.
		return river.JobSnooze(0)
	default:
		e.logger.ErrorContext(ctx, "exporter: job failed", slog.String("error", err.Error()))
		return err
	}
}

// acquire takes source name's export lock or reports ErrLockBusy.
func (e *Exporter) acquire(ctx context.Context, name string) (*locks.Lock, error) {
	lk, err := e.locker.TryAcquire(ctx, e.LockKey(name))
	if err != nil {
		return nil, err
	}
	dest := ""
	if s, ok := e.sourcesNow()[name]; ok {
		dest = s.base().DestinationName
	}
	e.lockCounts.count(name, dest, 1)
	jobOf(ctx).tookLock(lk, false)
	return lk, nil
}

// release gives the lock up.
func (e *Exporter) release(ctx context.Context, lk *locks.Lock, name string) {
	jobOf(ctx).gaveLock(lk)
	e.lockCounts.count(name, "", -1)
	if err := lk.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, locks.ErrLockLost) {
		e.logger.WarnContext(ctx, "exporter: release lock", slog.String("source", name), slog.String("error", err.Error()))
	}
}

// lockCause returns the lock's loss as the error when the job ended because of
// it, so callers see ErrLockLost rather than a bare cancellation.
func lockCause(lk *locks.Lock, err error) error {
	if err != nil && lk.Err() != nil && !errors.Is(err, lk.Err()) {
		return fmt.Errorf("%w (%w)", lk.Err(), err)
	}
	return err
}
