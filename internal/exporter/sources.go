package exporter

import (
	"context"
	"errors"
	"log/slog"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/sources"
)

// SnapshotChunkDefault is how many keys a chunk of a configured source's
// snapshot (or replay) logs.
const SnapshotChunkDefault = 1000

// configuredSource is a configured source (SYNCER_CONFIG): its pending keys
// from its change log, and its snapshot, whose code also logs the keys of
// its replays chunk by chunk as changes.
type configuredSource struct {
	Source
	src *sources.Source
	e   *Exporter
}

func (s *configuredSource) base() *Source { return &s.Source }

func (s *configuredSource) check(ctx context.Context) error {
	return sources.Check(ctx, s.e.pool, s.src)
}

func (s *configuredSource) live() target {
	b := bodiesOf(s.Source, true)
	f := s.e.sourceFeed(s.src, s.BatchSize)
	// The read returns each key's kept digest under the source's name,
	// which is its feed's name in internal/unchanged (Configured).
	f.kept = b.kept() != ""
	return target{feed: f, dest: s.Destination, destName: s.DestinationName, source: s.Name(), bodies: b}
}

// owns: a source's holder resends the batches of its own checkpoint only.
func (s *configuredSource) owns(name string) bool { return name == checkpoint.Source(s.Name()) }

// ended records the source's error where status and the console read it:
// a table that no longer matches, or none after work done.
func (s *configuredSource) ended(ctx context.Context, e *Exporter, err error) {
	switch {
	case errors.Is(err, sources.ErrSchemaChanged):
		e.logger.ErrorContext(ctx, "exporter: source stopped: its table no longer matches its configuration",
			slog.String("source", s.Name()), slog.String("error", err.Error()))
		if rerr := sources.SetError(context.WithoutCancel(ctx), e.pool, s.Name(), err.Error()); rerr != nil {
			e.logger.WarnContext(ctx, "exporter: record the source's error", slog.String("error", rerr.Error()))
		}
	case err == nil || errors.Is(err, errMore):
		if cerr := sources.SetError(ctx, e.pool, s.Name(), ""); cerr != nil {
			e.logger.WarnContext(ctx, "exporter: clear the source's error", slog.String("error", cerr.Error()))
		}
	}
}

// drain alternates snapshot chunks (and a replay's) and passes over the
// source's pending keys until both are done or the run limit has passed. A
// poll makes one pass; a notification (a command's: a replay, a
// resnapshot) drains again from the snapshot.
func (s *configuredSource) drain(e *Exporter, r *run) (func(context.Context) (int, error), func(context.Context, bool) (int, error)) {
	return e.drainSource(r, s.src, s.Name(), s.live(), true)
}

// drainSource is a configured source's drain and poll over live, the job
// named name; with side, it also runs the source's snapshot (and its
// replays' chunks), which a source's lanes leave to lane 0.
func (e *Exporter) drainSource(r *run, src *sources.Source, name string, live target, side bool) (func(context.Context) (int, error), func(context.Context, bool) (int, error)) {
	snapshotDone := !side
	drain := func(ctx context.Context) (int, error) {
		n := 0
		for {
			// A chunk that meets a row a writer holds gives way: the
			// pending keys still go, and the job comes back for the
			// snapshot.
			var busy error
			if !snapshotDone {
				done, err := sources.Snapshot(ctx, e.pool, src, SnapshotChunkDefault)
				switch {
				case errors.Is(err, sources.ErrSnapshotBusy):
					busy = err
				case err != nil:
					return n, err
				}
				snapshotDone = done
			}
			t := live
			if _, _, lane := jobs.LaneOf(name); lane {
				t.goOn = e.laneGoesOn(r, name, snapshotDone && busy == nil)
			}
			res, ok, err := e.turnPass(ctx, r, t, feed.Start, 0, e.now().Add(e.cfg.PassLength), false)
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
			if e.runOver(ctx, r.started) {
				return n, errMore
			}
			if e.shares.leaveForShare(ctx, name, r.started) {
				// A lane's backlog drains pass after pass and never
				// reaches linger's yield: the share is asked here too.
				return n, errShare
			}
			if !ok {
				// Another job's turn: it wakes this one when it is done.
				if _, err := e.lingerWait(ctx, e.wakers.of(name), e.cfg.HotPoll); err != nil {
					return n, err
				}
			}
		}
	}
	poll := func(ctx context.Context, woken bool) (int, error) {
		if woken {
			// A notification may be a command's (a replay, a
			// resnapshot): its work is logged by the snapshot.
			snapshotDone = !side
			return drain(ctx)
		}
		res, _, err := e.turnPass(ctx, r, live, feed.Start, 0, e.now().Add(e.cfg.PassLength), true)
		return res.rows, err
	}
	return drain, poll
}
