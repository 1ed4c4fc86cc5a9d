package exporter

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/sources"
)

// Defaults for sources.
const (
	SnapshotChunkDefault        = 1000
	SchemaChangedSnoozeDefault  = time.Minute
	sourceSnapshotBusySnoozeMin = 100 * time.Millisecond
)

// Source is a configured source (SYNCER_CONFIG) and its destination.
type Source struct {
	// Source is the installed source (sources.Resolve). Required.
	Source *sources.Source
	// Destination is the source's destination's deliverer. Required.
	Destination Destination
	// BatchSize is the most keys a batch holds. Defaults to
	// Config.BatchSize.
	BatchSize int
}

// SourceWorker exports configured sources.
type SourceWorker struct {
	river.WorkerDefaults[jobs.SourceArgs]
	e *Exporter
}

// SourceWorker returns the River worker of configured sources.
func (e *Exporter) SourceWorker() *SourceWorker { return &SourceWorker{e: e} }

// Timeout: see SyncWorker.Timeout.
func (w *SourceWorker) Timeout(*river.Job[jobs.SourceArgs]) time.Duration { return -1 }

// Work takes the source's lock (busy: snooze, never wait), resends its
// recorded batches, runs its snapshot and drains its pending keys. A
// source whose table no longer matches its configuration stops with a
// loud error and snoozes long; the other sources go on.
func (w *SourceWorker) Work(ctx context.Context, job *river.Job[jobs.SourceArgs]) error {
	e := w.e
	s, ok := e.sources[job.Args.Source]
	if !ok {
		// Not configured here (another daemon's configuration, or
		// removed): nothing to do, and no retry.
		e.logger.DebugContext(ctx, "exporter: source not configured in this daemon", slog.String("source", job.Args.Source))
		return nil
	}
	// Notifications from now on go to this job, not into more jobs.
	a := e.awaken(s.Source.Name)
	defer a.end()
	// A table dropped or renamed, or its triggers gone, sends no change:
	// only looking finds it.
	err := sources.Check(ctx, e.pool, s.Source)
	if err == nil {
		err = e.workSource(ctx, s, a)
	}
	if errors.Is(err, locks.ErrLockBusy) && a.end() {
		// Another job of the source is active here (it lingers, or will
		// find the lock busy too and see to it): it takes the work.
		return nil
	}
	if errors.Is(err, sources.ErrSchemaChanged) {
		e.logger.ErrorContext(ctx, "exporter: source stopped: its table no longer matches its configuration",
			slog.String("source", s.Source.Name), slog.String("error", err.Error()))
		if rerr := sources.SetError(context.WithoutCancel(ctx), e.pool, s.Source.Name, err.Error()); rerr != nil {
			e.logger.WarnContext(ctx, "exporter: record the source's error", slog.String("error", rerr.Error()))
		}
		return river.JobSnooze(SchemaChangedSnoozeDefault)
	}
	if errors.Is(err, sources.ErrSnapshotBusy) {
		return river.JobSnooze(max(e.cfg.LockBusySnooze, sourceSnapshotBusySnoozeMin))
	}
	if err == nil || errors.Is(err, errMore) {
		if cerr := sources.SetError(ctx, e.pool, s.Source.Name, ""); cerr != nil {
			e.logger.WarnContext(ctx, "exporter: clear the source's error", slog.String("error", cerr.Error()))
		}
	}
	return e.jobResult(ctx, err)
}

func (e *Exporter) workSource(ctx context.Context, s *Source, a *awake) error {
	lk, err := e.locker.TryAcquire(ctx, locks.SourceExportKey(e.cfg.Schema, s.Source.Name))
	if err != nil {
		return err
	}
	// Not e.release: syncer_lock_held is the resources' export lock.
	defer func() {
		if err := lk.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, locks.ErrLockLost) {
			e.logger.WarnContext(ctx, "exporter: release the source's lock", slog.String("source", s.Source.Name), slog.String("error", err.Error()))
		}
	}()
	lctx, cancel := lk.Context(ctx)
	defer cancel()
	// The destination's limits are kept by this process's deliverer: while
	// it pushes, no other daemon may push to the same destination (a source
	// of the same destination on another daemon snoozes, never waits).
	// This process's jobs of one destination take turns (turns.go).
	t := e.newTurn(lctx, s)
	defer t.done(ctx)
	if err := t.firstTake(lctx, e.cfg.PassLength+e.cfg.HotLinger); err != nil {
		return lockCause(lk, err)
	}
	err = e.drainSource(lctx, lk, t, s, a)
	return lockCause(lk, err)
}

// target is the source's feed and its destination.
func (e *Exporter) sourceTarget(s *Source) target {
	return target{feed: e.sourceFeed(s), dest: s.Destination, destName: s.Source.Destination, source: s.Source.Name}
}

// drainSource resends the source's recorded batches, then alternates
// snapshot chunks and passes over its pending keys until both are done or
// the run limit has passed, and lingers (linger.go) for more.
func (e *Exporter) drainSource(ctx context.Context, lk *locks.Lock, t *turn, s *Source, a *awake) error {
	tg := e.sourceTarget(s)
	own := tg.feed.Checkpoint()
	dctx, err := t.take(ctx)
	if err != nil {
		return err
	}
	if err := e.resume(dctx, lk, tg, func(name string) bool { return name == own }); err != nil {
		return t.cause(err)
	}
	started := e.now()
	total := 0
	defer func() {
		if total > 0 {
			e.logger.InfoContext(ctx, "exporter: source run", slog.String("source", s.Source.Name), slog.Int("rows", total),
				slog.Duration("took", e.since(started)))
		}
	}()
	// pass makes one pass in the destination's turn, and gives the turn to
	// a job here that waits for it. ok is false when the turn is another's.
	pass := func(ctx context.Context) (res passResult, ok bool, err error) {
		dctx, err := t.take(ctx)
		if errors.Is(err, locks.ErrLockBusy) {
			return res, false, nil
		}
		if err != nil {
			return res, false, err
		}
		res, err = e.pass(dctx, lk, tg, feed.Start, 0, e.now().Add(e.cfg.PassLength))
		err = t.cause(err)
		t.handOver(ctx)
		return res, true, err
	}
	snapshotDone, seen := false, 0
	drain := func(ctx context.Context) (int, error) {
		n := 0
		for {
			// A chunk that meets a row a writer holds gives way: the
			// pending keys still go, and the job comes back for the
			// snapshot.
			var busy error
			if !snapshotDone {
				done, err := sources.Snapshot(ctx, e.pool, s.Source, SnapshotChunkDefault)
				switch {
				case errors.Is(err, sources.ErrSnapshotBusy):
					busy = err
				case err != nil:
					return n, err
				}
				snapshotDone = done
			}
			res, ok, err := pass(ctx)
			n += res.rows
			if err != nil {
				return n, err
			}
			if ok && res.rows == 0 && (snapshotDone || busy != nil) {
				return n, busy
			}
			if e.isStopping() {
				return n, errStopping
			}
			if e.since(started) > e.cfg.MaxRun {
				return n, errMore
			}
			if !ok {
				// Another job's turn: it wakes this one when it is done.
				if _, err := e.lingerWait(ctx, e.wakerOf(s.Source.Name), e.cfg.HotPoll); err != nil {
					return n, err
				}
			}
		}
	}
	total, err = e.linger(ctx, &lingerFeed{
		name: s.Source.Name, awake: a, lk: lk, started: started,
		drain: drain,
		poll: func(ctx context.Context, woken bool) (int, error) {
			if woken {
				// A notification may be a command's (a replay, a
				// resnapshot): its work is logged by the snapshot.
				snapshotDone = false
				return drain(ctx)
			}
			res, _, err := pass(ctx)
			return res.rows, err
		},
		// Gone cold, the job holds no turn: another source of the
		// destination pushes while this one waits for a notification.
		cold: func(ctx context.Context) { t.done(ctx) },
		yield: func(ctx context.Context) (bool, error) {
			// Seen at yieldChecks checks in a row, about a second: a job
			// of it that is only being fetched lingers here by then.
			waiting, err := e.othersWait(ctx, s)
			if !waiting {
				seen = 0
			} else if seen++; seen >= yieldChecks {
				return true, err
			}
			return false, err
		},
	})
	return err
}

// yieldChecks is how many checks in a row (yieldCheckEvery apart) a
// lingering source's job finds another source of its destination waiting
// before it ends for it.
const yieldChecks = 5

// othersWait reports whether another source of s's destination has work
// and no job lingering here: its job snoozes on the destination's lock
// (another daemon's, or one with no linger slot), so this one ends and
// lets it in, as a job that drained used to.
func (e *Exporter) othersWait(ctx context.Context, s *Source) (bool, error) {
	var others []string
	for name, o := range e.sources {
		if name != s.Source.Name && o.Source.Destination == s.Source.Destination && !e.Active(name) {
			others = append(others, name)
		}
	}
	if len(others) == 0 {
		return false, nil
	}
	names, err := sources.WithWork(ctx, e.pool, others)
	return len(names) > 0, err
}
