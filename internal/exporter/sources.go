package exporter

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/checkpoint"
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

func isSourceCheckpoint(name string) bool {
	_, ok := checkpoint.SourceName(name)
	return ok
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
	err := e.workSource(ctx, s)
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

func (e *Exporter) workSource(ctx context.Context, s *Source) error {
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
	// The destination's limits are kept by this process's deliverer: while
	// it pushes, no other daemon may push to the same destination (a source
	// of the same destination on another daemon snoozes, never waits).
	dk, err := e.locker.TryAcquire(ctx, locks.DestinationKey(e.cfg.Schema, s.Source.Destination))
	if err != nil {
		return err
	}
	defer func() {
		if err := dk.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, locks.ErrLockLost) {
			e.logger.WarnContext(ctx, "exporter: release the destination's lock", slog.String("destination", s.Source.Destination), slog.String("error", err.Error()))
		}
	}()
	lctx, cancel := lk.Context(ctx)
	defer cancel()
	dctx, dcancel := dk.Context(lctx)
	defer dcancel()
	err = e.drainSource(dctx, lk, s)
	return lockCause(lk, lockCause(dk, err))
}

// target is the source's feed and its destination.
func (e *Exporter) sourceTarget(s *Source) target {
	return target{feed: e.sourceFeed(s), dest: s.Destination, destName: s.Source.Destination, source: s.Source.Name}
}

// drainSource resends the source's recorded batches, then alternates
// snapshot chunks and passes over its pending keys until both are done or
// the run limit has passed.
func (e *Exporter) drainSource(ctx context.Context, lk *locks.Lock, s *Source) error {
	t := e.sourceTarget(s)
	own := t.feed.Checkpoint()
	if err := e.resume(ctx, lk, t, func(name string) bool { return name == own }); err != nil {
		return err
	}
	started := time.Now()
	total := 0
	defer func() {
		if total > 0 {
			e.logger.InfoContext(ctx, "exporter: source run", slog.String("source", s.Source.Name), slog.Int("rows", total),
				slog.Duration("took", time.Since(started)))
		}
	}()
	snapshotDone := false
	for {
		// A chunk that meets a row a writer holds gives way: the pending
		// keys still go, and the job comes back for the snapshot.
		var busy error
		if !snapshotDone {
			done, err := sources.Snapshot(ctx, e.pool, s.Source, SnapshotChunkDefault)
			switch {
			case errors.Is(err, sources.ErrSnapshotBusy):
				busy = err
			case err != nil:
				return err
			}
			snapshotDone = done
		}
		res, err := e.pass(ctx, lk, t, feed.Start, 0, time.Now().Add(e.cfg.PassLength))
		total += res.rows
		if err != nil {
			return err
		}
		if res.rows == 0 && (snapshotDone || busy != nil) {
			return busy
		}
		if e.isStopping() {
			return errStopping
		}
		if time.Since(started) > e.cfg.MaxRun {
			return errMore
		}
	}
}
