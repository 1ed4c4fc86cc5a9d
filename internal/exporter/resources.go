package exporter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/replays"
)

// resourcesSource is the resources table as a source: its pending rows
// (and tombstones), and its replays, which re-export ranges of it under
// keys of their own, chunk by chunk between live batches, in its job.
type resourcesSource struct {
	Source
	e *Exporter
}

func (s *resourcesSource) base() *Source               { return &s.Source }
func (s *resourcesSource) check(context.Context) error { return nil }

// live is resources' live export, whose target also resends the batches of
// its replays.
func (s *resourcesSource) live() target {
	b := rowBodiesOf(s.Source, true)
	return target{feed: s.e.liveFeed(s.lim(), b.kept()), dest: s.Destination, destName: s.DestinationName, source: s.Name(), bodies: b}
}

func (s *resourcesSource) lim() feed.Limits { return s.e.limits(s.BatchSize) }

// owns: resources' holder resends the batches of resources, live and
// replays.
func (s *resourcesSource) owns(name string) bool {
	return checkpoint.OwnerOf(name).Kind != checkpoint.KindSource
}

func (s *resourcesSource) ended(context.Context, *Exporter, error) {}

// drain passes over the pending rows until none is left, and runs the
// waiting replays (which send live rows between their chunks) as soon as a
// pass ends with one waiting, until the run limit: while writes outpace
// the third party the live rows never run out, and a replay that waited
// for them would never go. A poll looks for live rows once, and for
// replays when a notification came (a replay command wakes the job) or
// yieldCheckEvery has passed.
func (s *resourcesSource) drain(e *Exporter, r *run) (func(context.Context) (int, error), func(context.Context, bool) (int, error)) {
	var lastLook time.Time
	drain := func(ctx context.Context) (int, error) {
		total := 0
		for {
			// Replays first: each of their chunks sends live rows too,
			// so a job that comes back at its run limit in the middle of
			// one goes on with it, and the replay keeps its share.
			lastLook = e.now()
			waiting, err := replays.AnyWaiting(ctx, e.pool)
			if err != nil {
				return total, err
			}
			if waiting {
				n, err := e.runReplays(ctx, r)
				total += n
				if err != nil {
					return total, err
				}
			}
			n, err := e.drainLive(ctx, r, drainOpts{deadline: r.started.Add(e.cfg.MaxRun), replays: true})
			total += n
			if !errors.Is(err, errReplayWaiting) {
				return total, err
			}
		}
	}
	poll := func(ctx context.Context, woken bool) (int, error) {
		n, err := e.drainLive(ctx, r, drainOpts{once: true})
		if err != nil || (!woken && e.since(lastLook) < yieldCheckEvery) {
			return n, err
		}
		lastLook = e.now()
		waiting, err := replays.AnyWaiting(ctx, e.pool)
		if err != nil || !waiting {
			return n, err
		}
		m, err := drain(ctx)
		return n + m, err
	}
	return drain, poll
}

// drainOpts shape a drainLive call.
type drainOpts struct {
	// maxBatches bounds the batches pushed; 0 means no limit.
	maxBatches int
	// once makes one pass only, for polls: the next poll finds what
	// committed late.
	once bool
	// deadline, when set, ends the drain with errMore once passed: a job
	// whose rows keep coming faster than the third party takes them still
	// ends at its run limit.
	deadline time.Time
	// replays ends the drain with errReplayWaiting after a pass when a
	// replay waits.
	replays bool
}

// errReplayWaiting ends a drain of live rows for a waiting replay.
var errReplayWaiting = errors.New("exporter: a replay waits")

// drainLive pushes pending rows until a pass finds none (or as o says). It
// returns how many rows it pushed. Every pass is bounded by PassLength, so
// between passes it can look at the clock.
func (e *Exporter) drainLive(ctx context.Context, r *run, o drainOpts) (int, error) {
	total := 0
	live := r.s.live()
	for {
		until := e.now().Add(e.cfg.PassLength)
		if !o.deadline.IsZero() && o.deadline.Before(until) {
			until = o.deadline
		}
		res, ok, err := e.turnPass(ctx, r, live, feed.Start, o.maxBatches, until, o.once)
		total += res.rows
		if err != nil || !ok || res.rows == 0 || o.maxBatches > 0 || o.once {
			return total, err
		}
		if !o.deadline.IsZero() && (e.now().After(o.deadline) || e.slotGiven(ctx, r.started)) {
			return total, errMore
		}
		if o.replays {
			if waiting, err := replays.AnyWaiting(ctx, e.pool); err != nil || waiting {
				return total, cmp.Or(err, errReplayWaiting)
			}
		}
		// A pass that found rows may have been overtaken by rows with
		// lower ids that committed late, or ended at its length: look
		// again from the start.
	}
}

// runReplays runs the unfinished replays of resources in order until they
// are done or the run limit has passed (errMore).
func (e *Exporter) runReplays(ctx context.Context, r *run) (int, error) {
	ids, err := replays.Unfinished(ctx, e.pool)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, id := range ids {
		rp, err := replays.Load(ctx, e.pool, id)
		if errors.Is(err, replays.ErrNotFound) {
			continue
		}
		if err != nil {
			return total, err
		}
		if rp.State.Finished() {
			continue
		}
		n, err := e.replay(ctx, r, rp)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// replay sends replay rp's range chunk by chunk from its checkpoint, live
// rows first in every chunk (at most liveBatches of them), so a backfill
// delays them by at most one chunk and, while live rows keep coming faster
// than the third party takes them, still gets its share. It ends with
// errMore at the run limit or when the daemon stops; the next run goes on
// from the replay's checkpoint.
func (e *Exporter) replay(ctx context.Context, r *run, rp replays.Replay) (int, error) {
	if err := replays.Start(ctx, e.pool, rp.ID); err != nil {
		return 0, err
	}
	s := r.s.base()
	t := target{feed: e.replayFeed(rp.ID, rp.Filter, e.limits(s.BatchSize)), dest: s.Destination, destName: s.DestinationName, bodies: rowBodiesOf(*s, false)}
	cp, err := checkpoint.Get(ctx, e.pool, t.feed.Checkpoint())
	if err != nil {
		return 0, err
	}
	after := feed.Start
	if cp.Positioned {
		after = cp.LastID
	}
	liveBatches := liveBatchesPerChunk(e.cfg.ReplayChunkBatches, e.cfg.ReplayShare)
	total := 0
	for {
		n, err := e.drainLive(ctx, r, drainOpts{maxBatches: liveBatches})
		total += n
		if err != nil {
			return total, err
		}
		// A cancelled replay sends nothing more: checked before every
		// chunk, and its recorded batches are dropped at the next resume.
		if cancelled, err := replays.Cancelled(ctx, e.pool, rp.ID); err != nil || cancelled {
			return total, err
		}
		chunkStart := e.now()
		res, ok, err := e.turnPass(ctx, r, t, after, e.cfg.ReplayChunkBatches, time.Time{}, false)
		total += res.rows
		if ok {
			e.logger.DebugContext(ctx, "exporter: replay chunk", slog.Int64("replay_id", rp.ID), slog.Int("rows", res.rows),
				slog.Int64("last_id", res.position), slog.Duration("took", e.since(chunkStart)))
		}
		if err != nil {
			return total, err
		}
		if ok {
			after = res.position
			if res.done {
				break
			}
		} else if _, err := e.lingerWait(ctx, e.wakers.of(s.Name()), e.cfg.HotPoll); err != nil {
			// Another job's turn at the destination: it wakes this one.
			return total, err
		}
		if e.isStopping() || e.runOver(ctx, r.started) {
			return total, errMore
		}
	}
	// The gate opens with the replay's end: rows written after it bring
	// a job back.
	if err := r.lk.WithTx(ctx, func(tx pgx.Tx) error {
		if _, err := replays.Finish(ctx, tx, rp.ID); err != nil {
			return err
		}
		return outbox.SetArmed(ctx, tx, true)
	}); err != nil {
		return total, fmt.Errorf("exporter: finish replay: %w", err)
	}
	// The replay is done whatever the summary's read says: a failure to
	// read it only leaves the counts out of the log line.
	if cp, err = checkpoint.Get(ctx, e.pool, t.feed.Checkpoint()); err != nil {
		e.logger.WarnContext(ctx, "exporter: replay done; its counts could not be read", slog.Int64("replay_id", rp.ID),
			slog.String("error", err.Error()))
		return total, nil
	}
	e.logger.InfoContext(ctx, "exporter: replay done", slog.Int64("replay_id", rp.ID),
		slog.Int64("rows", cp.RowsDone), slog.Int64("failed", cp.RowsFailed))
	return total, nil
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
