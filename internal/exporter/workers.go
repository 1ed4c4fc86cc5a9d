package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/replays"
)

// SyncWorker runs the live sync.
type SyncWorker struct {
	river.WorkerDefaults[jobs.SyncArgs]
	e *Exporter
}

// SyncWorker returns the River worker of the live sync.
func (e *Exporter) SyncWorker() *SyncWorker { return &SyncWorker{e: e} }

// Timeout disables River's job timeout: executions bound themselves by
// Config.MaxRun, and a timeout would cancel a push that must be marked.
func (w *SyncWorker) Timeout(*river.Job[jobs.SyncArgs]) time.Duration { return -1 }

// Work drains pending rows under the export lock, then lingers.
func (w *SyncWorker) Work(ctx context.Context, job *river.Job[jobs.SyncArgs]) error {
	if w.e.dest == nil {
		// This daemon exports configured sources only; a daemon that
		// exports resources enqueues its own job again (its relay's poll).
		return nil
	}
	return w.e.jobResult(ctx, w.e.workLive(ctx))
}

// ReplayWorker runs replays.
type ReplayWorker struct {
	river.WorkerDefaults[jobs.ReplayArgs]
	e *Exporter
}

// ReplayWorker returns the River worker of replays.
func (e *Exporter) ReplayWorker() *ReplayWorker { return &ReplayWorker{e: e} }

// Timeout: see SyncWorker.Timeout.
func (w *ReplayWorker) Timeout(*river.Job[jobs.ReplayArgs]) time.Duration { return -1 }

// Work pushes one chunk of the replay, after draining live rows first so a
// backfill never starves new inserts.
func (w *ReplayWorker) Work(ctx context.Context, job *river.Job[jobs.ReplayArgs]) error {
	if w.e.dest == nil {
		// As SyncWorker: the replay stays unfinished, and a daemon that
		// exports resources gives it a job of its own (reviveReplays).
		return nil
	}
	return w.e.jobResult(ctx, w.e.workReplay(ctx, job.Args.ReplayID))
}

// errMore means the job has work left and should run again at once.
var errMore = errors.New("exporter: more work")

// retryAfter is an error that knows when to try again.
type retryAfter interface{ RetryAfter() time.Duration }

// jobResult turns the outcome of an execution into what River should do.
// Expected conditions become snoozes, which cost no attempt; only unexpected
// errors go through River's retry policy.
func (e *Exporter) jobResult(ctx context.Context, err error) error {
	var ra retryAfter
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errYield):
		return nil
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
		e.logger.WarnContext(ctx, "exporter: pausing", slog.String("error", err.Error()),
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

// acquire takes the export lock or reports ErrLockBusy.
func (e *Exporter) acquire(ctx context.Context) (*locks.Lock, error) {
	lk, err := e.locker.TryAcquire(ctx, e.lockKey)
	if err != nil {
		return nil, err
	}
	e.metrics.SetLockHeld(e.holds.Add(1) > 0)
	return lk, nil
}

// release gives the lock up. syncer_lock_held counts the process's
// holders, not the last one's word: a job whose lock was lost (its session
// ended) releases it after another job of the process took the lock
// anew, and must not say the process holds none (seed 20261125's soak).
func (e *Exporter) release(ctx context.Context, lk *locks.Lock) {
	e.metrics.SetLockHeld(e.holds.Add(-1) > 0)
	if err := lk.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, locks.ErrLockLost) {
		e.logger.WarnContext(ctx, "exporter: release lock", slog.String("error", err.Error()))
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

// drainOpts shape a drainLive call.
type drainOpts struct {
	// maxBatches bounds the batches pushed; 0 means no limit.
	maxBatches int
	// once makes one pass only, for polls: the next poll finds what
	// committed late.
	once bool
	// keepEvents skips deleting outbox events, for polls while the gate is
	// shut: then no writer appends any, and a statement a poll is spared.
	keepEvents bool
	// deadline, when set, ends the drain with errMore once passed: a job
	// whose rows keep coming faster than the third party takes them still
	// ends at its run limit.
	deadline time.Time
	// yield ends the drain with errYield when a replay waits for the lock.
	yield bool
}

// errYield ends a live job so that a waiting replay gets the lock; the
// replay drains live rows itself, and the open gate brings a new live job.
var errYield = errors.New("exporter: yielding to a replay")

// drainLive pushes pending rows until a pass finds none (or as o says). It
// returns how many rows it pushed. Every pass is bounded by PassLength, so
// between passes it can look at the clock and at waiting replays.
func (e *Exporter) drainLive(ctx context.Context, lk *locks.Lock, o drainOpts) (int, error) {
	total := 0
	for {
		if !o.keepEvents {
			if err := outbox.Consume(ctx, e.pool); err != nil {
				return total, err
			}
		}
		until := e.now().Add(e.cfg.PassLength)
		if !o.deadline.IsZero() && o.deadline.Before(until) {
			until = o.deadline
		}
		res, err := e.pass(ctx, lk, e.rows(), feed.Start, o.maxBatches, until)
		total += res.rows
		if err != nil || res.rows == 0 || o.maxBatches > 0 || o.once {
			return total, err
		}
		if o.yield {
			waiting, err := e.replayWaiting(ctx)
			if err != nil {
				return total, err
			}
			if waiting {
				return total, errYield
			}
		}
		if !o.deadline.IsZero() && e.now().After(o.deadline) {
			return total, errMore
		}
		// A pass that found rows may have been overtaken by rows with
		// lower ids that committed late, or ended at its length: look
		// again from the start.
	}
}

func (e *Exporter) workLive(ctx context.Context) error {
	// A waiting replay sends live rows itself, chunk after chunk: a live job
	// that took the lock now would only win it back from the replay, again
	// and again, while writes outpace the third party.
	if waiting, err := e.replayWaiting(ctx); err != nil || waiting {
		return err
	}
	lk, err := e.acquire(ctx)
	if err != nil {
		return err
	}
	defer e.release(ctx, lk)
	lctx, cancel := lk.Context(ctx)
	defer cancel()
	err = e.live(lctx, lk)
	return lockCause(lk, err)
}

func (e *Exporter) live(ctx context.Context, lk *locks.Lock) error {
	started := e.now()
	total := 0
	defer func() {
		if total > 0 {
			e.logger.InfoContext(ctx, "exporter: live sync run", slog.Int("rows", total),
				slog.Duration("took", e.since(started)), slog.String("last_idempotency_key", e.lastPushedKey()))
		}
	}()

	a := e.awaken("")
	defer a.end()
	if err := e.resume(ctx, lk, e.rows(), ownsRows); err != nil {
		return err
	}
	var err error
	total, err = e.linger(ctx, &lingerFeed{
		awake: a, lk: lk, started: started,
		// A waiting replay gets the lock: it drains live rows itself
		// between its chunks, and the open gate brings a new live job
		// once it is done.
		drain: func(ctx context.Context) (int, error) {
			return e.drainLive(ctx, lk, drainOpts{deadline: started.Add(e.cfg.MaxRun), yield: true})
		},
		// While the gate is shut no writer appends an event: a poll that
		// no notification woke spares the statement that deletes them.
		poll: func(ctx context.Context, woken bool) (int, error) {
			return e.drainLive(ctx, lk, drainOpts{once: true, keepEvents: !woken})
		},
		yield: e.replayWaiting,
	})
	return err
}

// replayWaiting reports whether a replay is waiting for the lock.
func (e *Exporter) replayWaiting(ctx context.Context) (bool, error) {
	return replays.AnyWaiting(ctx, e.pool)
}

func (e *Exporter) workReplay(ctx context.Context, id int64) error {
	r, err := replays.Load(ctx, e.pool, id)
	if errors.Is(err, replays.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.State.Finished() {
		return nil
	}
	lk, err := e.acquire(ctx)
	if err != nil {
		return err
	}
	defer e.release(ctx, lk)
	lctx, cancel := lk.Context(ctx)
	defer cancel()
	err = e.replayChunk(lctx, lk, r)
	return lockCause(lk, err)
}

func (e *Exporter) replayChunk(ctx context.Context, lk *locks.Lock, r replays.Replay) error {
	if err := replays.Start(ctx, e.pool, r.ID); err != nil {
		return err
	}
	t := e.replayTarget(r.ID, r.Filter)
	if err := e.resume(ctx, lk, e.rows(), ownsRows); err != nil {
		return err
	}
	cp, err := checkpoint.Get(ctx, e.pool, t.feed.Checkpoint())
	if err != nil {
		return err
	}
	after := feed.Start
	if cp.Positioned {
		after = cp.LastID
	}
	// Chunks until ReplayHold has passed, then the lock goes back. Live rows
	// go first in every chunk, at most liveBatches of them, so a backfill
	// delays them by at most one chunk and, while live rows keep coming
	// faster than the third party takes them, still gets its share.
	liveBatches := liveBatchesPerChunk(e.cfg.ReplayChunkBatches, e.cfg.ReplayShare)
	held := e.now()
	for {
		if _, err := e.drainLive(ctx, lk, drainOpts{maxBatches: liveBatches}); err != nil {
			return err
		}
		// A cancelled replay sends nothing more: checked before every
		// chunk, and its recorded batches are dropped at the next resume.
		if cancelled, err := replays.Cancelled(ctx, e.pool, r.ID); err != nil || cancelled {
			return err
		}
		chunkStart := e.now()
		res, err := e.pass(ctx, lk, t, after, e.cfg.ReplayChunkBatches, time.Time{})
		e.logger.DebugContext(ctx, "exporter: replay chunk", slog.Int64("replay_id", r.ID), slog.Int("rows", res.rows),
			slog.Int64("last_id", res.position), slog.Duration("took", e.since(chunkStart)))
		if err != nil {
			return err
		}
		after = res.position
		if res.done {
			break
		}
		if e.isStopping() || e.since(held) >= e.cfg.ReplayHold {
			return errMore
		}
	}
	// The gate opens with the replay's end: rows written after it bring a
	// live job back.
	if err := lk.WithTx(ctx, func(tx pgx.Tx) error {
		if _, err := replays.Finish(ctx, tx, r.ID); err != nil {
			return err
		}
		return outbox.SetArmed(ctx, tx, true)
	}); err != nil {
		return fmt.Errorf("exporter: finish replay: %w", err)
	}
	// The replay is done whatever the summary's read says: a failure to
	// read it only leaves the counts out of the log line.
	if cp, err = checkpoint.Get(ctx, e.pool, t.feed.Checkpoint()); err != nil {
		e.logger.WarnContext(ctx, "exporter: replay done; its counts could not be read", slog.Int64("replay_id", r.ID),
			slog.String("error", err.Error()))
		return nil
	}
	e.logger.InfoContext(ctx, "exporter: replay done", slog.Int64("replay_id", r.ID),
		slog.Int64("rows", cp.RowsDone), slog.Int64("failed", cp.RowsFailed))
	return nil
}

// liveBatchesPerChunk is how many live batches go before each chunk of
// chunk replay batches so that the replay gets at least share of the
// batches while live rows keep coming: rounded down (rounding up gave a
// replay of share 0.75 and chunks of 4 two live batches, 4 of 6), and at
// least one, so live rows are never starved either. The epsilon keeps an
// exact quotient computed a hair above its integer (12 for the defaults)
// from losing one.
func liveBatchesPerChunk(chunk int, share float64) int {
	return max(1, int(math.Floor(float64(chunk)*(1-share)/share+1e-9)))
}
