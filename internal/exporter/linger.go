package exporter

import (
	"context"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/locks"
)

// Lingering: a job that has drained its feed keeps its lock for a while and
// looks again, so that a row committed meanwhile needs no outbox event,
// relay round or new River job (picked up on River's fetch poll) to be
// found. Every feed's job lingers the same way, in linger; a feed says only
// how it drains, looks once and yields.
//
// While writes flow the job is hot: it polls, and when every feed of this
// process has a job lingering hot the gate is shut, so writers append no
// event and send no notification (NOTIFY serialises their commits). When
// no row came for HotLinger it turns cold: it opens the gate and waits for
// a notification, which the relay hands it (Wake) instead of inserting a
// job, for ColdLinger; then it ends.

// yieldCheckEvery is how often a hot job asks whether it should give way.
const yieldCheckEvery = 200 * time.Millisecond

// lingerFeed is what linger needs of one feed's job.
type lingerFeed struct {
	// name is the source as the relay names it (outbox.Waker).
	name string
	// awake is the feed's waker, activated by the job before it took its
	// lock; linger takes it over.
	awake *awake
	// lk is the job's lock: the gate is shut in a transaction on it, so a
	// job that lost its lock shuts nothing.
	lk *locks.Lock
	// started is when the job started: MaxRun counts from it.
	started time.Time
	// drain passes until the feed is drained (or the job's limits end it).
	drain func(ctx context.Context) (int, error)
	// poll looks once. woken says a notification came or the gate is
	// open, so events may wait and a command may have asked for work
	// (a source's replay).
	poll func(ctx context.Context, woken bool) (int, error)
	// yield reports whether the job should end now so that other work
	// takes its destination (another source's job). Optional.
	yield func(ctx context.Context) (bool, error)
	// cold is called as the job stops polling, before it waits for a
	// notification (a source gives its destination's lock back).
	// Optional.
	cold func(ctx context.Context)
	// settle writes what the last look left unmarked (carried) before
	// the job waits longer than a look: its rows would read as pending
	// for the whole wait. Optional.
	settle func(ctx context.Context) error
}

// linger drains f, then lingers as the package comment of this file says,
// and returns how many rows it pushed. It ends with nil when its time is up
// or the daemon stops, errMore at MaxRun while rows keep coming.
func (e *Exporter) linger(ctx context.Context, f *lingerFeed) (total int, err error) {
	w := f.awake.w
	f.awake.taken = true
	defer w.deactivate()
	// A job that lingers holds a worker slot: at most MaxLingering
	// sources' jobs do, so other sources' jobs find one.
	lingers := e.takeLingerSlot(ctx)
	if lingers {
		defer e.giveLingerSlot(ctx)
	}
	hot := false
	defer func() {
		// The gate opens with the job's end, whatever the end: rows written
		// after it bring a job back (an open gate is always safe).
		if hot {
			_, _ = e.gate.noteCold(ctx, f.name)
		}
	}()
rounds:
	for {
		if lingers && !hot {
			if err := e.gate.noteHot(ctx, f.name, f.lk); err != nil {
				return total, err
			}
			hot = true
		}
		n, err := f.drain(ctx)
		total += n
		if err != nil || !lingers {
			if err == nil && w.deactivate() {
				// A notification came while draining: look again.
				w.activate()
				continue
			}
			return total, err
		}

		// Hot: writes may be flowing; poll instead of making every writer
		// notify.
		lastFound, lastYieldCheck, lastLook := e.now(), time.Time{}, e.now()
		for e.since(lastFound) < e.cfg.HotLinger {
			if e.isStopping() {
				return total, nil
			}
			if e.runOver(ctx, f.started) {
				return total, errMore
			}
			if f.yield != nil && e.since(lastYieldCheck) > yieldCheckEvery {
				lastYieldCheck = e.now()
				if y, err := f.yield(ctx); y || err != nil {
					return total, err
				}
			}
			woken, err := e.lingerWait(ctx, w, e.hotWait(n, lastLook))
			if err != nil {
				return total, err
			}
			lastLook = e.now()
			if n, err = f.poll(ctx, woken); err != nil {
				return total + n, err
			}
			total += n
			if n > 0 {
				lastFound = e.now()
			}
		}

		// Cold: open the gate, then look again for rows whose writers
		// read the gate shut just before it opened: until every
		// transaction that was running when it opened has ended (such a
		// writer had its transaction id by then: the trigger reads the
		// gate after the row is written), and once more after that. A
		// writer descheduled between its read of the gate and its commit
		// is found so, whatever the load, where a fixed number of looks
		// missed one (TestRowAtTheEndOfTheLastPass, in a full parallel
		// run). A transaction that stays open longer than coldSettle
		// leaves its rows to the relay's poll.
		if f.yield != nil {
			if y, err := f.yield(ctx); y || err != nil {
				return total, err
			}
		}
		hot = false
		opened, err := e.gate.noteCold(ctx, f.name)
		if err != nil {
			return total, err
		}
		settleBy := e.now().Add(coldSettle)
		for looks := 1; ; looks++ {
			settled := looks > minColdLooks && (e.now().After(settleBy) || e.gate.settled(ctx, opened))
			n, err := f.poll(ctx, true)
			total += n
			if err != nil {
				return total, err
			}
			if settled {
				break
			}
			woken, err := e.lingerWait(ctx, w, e.cfg.HotPoll)
			if err != nil || e.isStopping() {
				return total, err
			}
			if woken {
				continue rounds
			}
		}
		if f.settle != nil {
			if err := f.settle(ctx); err != nil {
				return total, err
			}
		}
		if f.cold != nil {
			f.cold(ctx)
		}
		woken, err := e.lingerWait(ctx, w, e.cfg.ColdLinger)
		if err != nil || e.isStopping() {
			return total, err
		}
		if woken {
			continue
		}
		if e.runOver(ctx, f.started) {
			return total, nil
		}
		// Stop taking wake-ups; one that arrived meanwhile is handled here,
		// any later one makes the relay enqueue a new job.
		if !w.deactivate() {
			return total, nil
		}
		w.activate()
	}
}

// lingerWait waits d for a wake-up and reports whether one came. The
// daemon's stop ends the wait as a wake-up would (the caller checks
// isStopping); a cancelled ctx ends it with its error.
func (e *Exporter) lingerWait(ctx context.Context, w *waker, d time.Duration) (bool, error) {
	if d <= 0 {
		select {
		case <-w.ch:
			return true, nil
		default:
			return false, nil
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-e.stopping:
		return true, nil
	case <-w.ch:
		return true, nil
	case <-t.C:
		return false, nil
	}
}

// hotWait is how long a hot job waits before its next poll, having found
// n rows in the poll that started at lastLook: a poll that found rows is
// followed by the next HotPoll after it started, at once if it took
// longer, and an empty one by a wait of HotPoll. So batches grow with the
// rate (what came during one pass is the next batch) and the wait never
// does. Waiting longer the more rows came (up to ten times HotPoll, as
// before issue 32) fed itself above 8/HotPoll rows a second (1,600 at
// 5 ms): a longer wait found more rows, which made the next wait longer,
// up to 50 ms, and latency jumped tenfold. Looking again at once after
// rows did not feed itself, but at a few rows a look it made a pass for
// every row or two: 300 passes a second at 500 rows a second, each
// costing what a plain poller's look costs (docs/benchmarks.md, "A look
// every HotPoll"), where one every 5 ms gave three rows a look for 1.5 ms
// more p50.
func (e *Exporter) hotWait(n int, lastLook time.Time) time.Duration {
	if n > 0 {
		return max(e.cfg.HotPoll-e.since(lastLook), 0)
	}
	return e.cfg.HotPoll
}

// minColdLooks is how many looks a job makes after it opened the gate at
// the least; coldSettle bounds how long it looks for the writers that
// were running as it opened the gate to end.
const (
	minColdLooks = 4
	coldSettle   = time.Second
)

// slots is a counting semaphore that never waits.
type slots struct {
	mu        sync.Mutex
	used, max int
}

func (s *slots) TryAcquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used >= s.max {
		return false
	}
	s.used++
	return true
}

func (s *slots) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used--
}
