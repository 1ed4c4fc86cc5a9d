package exporter

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
)

// Turns at a destination's lock. Every push of a source happens
// under its destination's lock (locks.DestinationKey), since the
// destination's limits are kept by one process's deliverer. A source's job
// that lingers would keep that lock, and another source of the same
// destination would never push: so this process's source jobs take turns
// at it. A job that wants the lock while another job here holds it says
// so; the holder gives it back after its pass and wakes the wanting jobs,
// and it takes no turn itself while one of them waits. A job that has gone
// cold holds no turn at all.

// turnsOf is this process's state of turns, by destination.
type turnsOf struct {
	mu sync.Mutex
	// held: a job here holds the destination's lock.
	held map[string]bool
	// wants: the sources whose jobs here wait for the destination's lock.
	wants map[string]map[string]bool
}

// turn is one source job's place at its destination's lock.
type turn struct {
	e      *Exporter
	dest   string
	source string
	parent context.Context
	dk     *locks.Lock
	ctx    context.Context // cancelled with dk's loss
	cancel context.CancelFunc
	// free marks a lane's turn: its batches go to each tenant's own
	// destination, whose limits its own deliverer keeps, so a lane takes
	// no turn at the destination's lock and lanes push at once.
	free bool
}

func (e *Exporter) newTurn(ctx context.Context, s *Source) *turn {
	_, _, lane := jobs.LaneOf(s.Name())
	return &turn{e: e, dest: s.DestinationName, source: s.Name(), parent: ctx, free: lane}
}

// take returns the context of the destination's lock, taking the lock if
// the job does not hold it: ErrLockBusy when another session holds it, or
// when another job here waits for its turn and this one did not.
func (t *turn) take(ctx context.Context) (context.Context, error) {
	if t.free {
		return ctx, nil
	}
	if t.dk != nil {
		return t.ctx, nil
	}
	ts := &t.e.turns
	ts.mu.Lock()
	waiting := ts.wants[t.dest][t.source]
	if !waiting && len(ts.wants[t.dest]) > 0 {
		t.wantLocked()
		ts.mu.Unlock()
		return nil, locks.ErrLockBusy
	}
	ts.mu.Unlock()
	dk, err := t.e.locker.TryAcquire(ctx, locks.DestinationKey(t.e.cfg.Schema, t.dest))
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err != nil {
		if errors.Is(err, locks.ErrLockBusy) {
			t.wantLocked()
		}
		return nil, err
	}
	delete(ts.wants[t.dest], t.source)
	ts.held[t.dest] = true
	jobOf(t.parent).tookLock(dk, true)
	t.dk = dk
	t.ctx, t.cancel = dk.Context(t.parent)
	return t.ctx, nil
}

// wantLocked notes the job waiting for its turn. ts.mu is held.
func (t *turn) wantLocked() {
	ts := &t.e.turns
	if ts.wants[t.dest] == nil {
		ts.wants[t.dest] = map[string]bool{}
	}
	ts.wants[t.dest][t.source] = true
}

// firstTake takes the lock as a job starts: when a job here holds it, the
// job waits for its turn (a pass at most, then the holder gives it back)
// rather than snooze behind a holder that may linger; ErrLockBusy when the
// holder is another daemon's, or after limit.
func (t *turn) firstTake(ctx context.Context, limit time.Duration) error {
	if t.free {
		return nil
	}
	deadline := t.e.now().Add(limit)
	for {
		_, err := t.take(ctx)
		if !errors.Is(err, locks.ErrLockBusy) {
			return err
		}
		t.e.turns.mu.Lock()
		local := t.e.turns.held[t.dest]
		t.e.turns.mu.Unlock()
		if !local || t.e.now().After(deadline) {
			t.unwant()
			return err
		}
		select {
		case <-ctx.Done():
			t.unwant()
			return ctx.Err()
		case <-time.After(t.e.cfg.HotPoll):
		}
	}
}

// unwant withdraws the job's wish for a turn.
func (t *turn) unwant() {
	t.e.turns.mu.Lock()
	defer t.e.turns.mu.Unlock()
	delete(t.e.turns.wants[t.dest], t.source)
}

// handOver gives the lock back when another job here waits for it, and
// wakes the waiting jobs.
func (t *turn) handOver(ctx context.Context) {
	if t.dk == nil {
		return
	}
	ts := &t.e.turns
	ts.mu.Lock()
	var waiting []string
	for src := range ts.wants[t.dest] {
		waiting = append(waiting, src)
	}
	ts.mu.Unlock()
	if len(waiting) == 0 {
		return
	}
	t.release(ctx)
	for _, src := range waiting {
		t.e.Wake(src)
	}
}

// release gives the lock back, if the job holds it.
func (t *turn) release(ctx context.Context) {
	if t.dk == nil {
		return
	}
	t.cancel()
	jobOf(t.parent).gaveLock(t.dk)
	ts := &t.e.turns
	ts.mu.Lock()
	delete(ts.held, t.dest)
	ts.mu.Unlock()
	if err := t.dk.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, locks.ErrLockLost) {
		t.e.logger.WarnContext(ctx, "exporter: release the destination's lock", slog.String("destination", t.dest), slog.String("error", err.Error()))
	}
	t.dk, t.ctx, t.cancel = nil, nil, nil
}

// done ends the job's place: the lock given back, no wish left.
func (t *turn) done(ctx context.Context) {
	t.release(ctx)
	t.unwant()
}

// cause returns the lock's loss as err when the pass ended because of it.
func (t *turn) cause(err error) error {
	if t.dk == nil {
		return err
	}
	return lockCause(t.dk, err)
}
