package exporter

// A lane's pass goes on past its time while nothing waits for its end
// (issue 54; docs/design.md, "Lanes at each tenant's limit", 6). A
// pass's end stops every tenant of the lane at once: its pushes still
// waiting for their tokens are withdrawn, its last outcomes written, and
// the next pass looks its tenants up, reads them and records their first
// batches before any request goes, each a statement waiting for one of
// the pool's five connections. In the own-limits row of syncer-lab bench
// (200 tenants in 16 lanes, load average 10) that was 350-520 ms every
// 2 s in which a lane sent nothing, and a tenant at 10 requests/s fell to
// 0.87x of its limit by those stops alone.
//
// So a lane's drain asks, as each PassLength comes, whether anything
// needs the pass's end: a job that must give its slot or its lane away
// (runOver, laneShares), a stop, lane 0's snapshot, keys held or tenants
// set aside (read and resent only at a pass's start), a tenant read to
// its end (a change to a key behind its cursor is read by the next pass
// only), a tenant left out until the pass's end (paused, refused, a long
// Retry-After), and a batch answered without its rows taken
// (unconnected, held, deferred items: read again by the next pass). With
// none, the pass goes on for another PassLength, up to lanePassLongest:
// every tenant it reads has a backlog, and a change behind a tenant's
// cursor waits at most that long, as the backlog's own rows wait.

import (
	"context"
	"time"
)

// lanePassLongest bounds a lane's pass that goes on.
const lanePassLongest = 10 * time.Second

// passGoesOn is the reader's question as a pass of t reaches its time, nil
// when the pass ends then anyway: t is not a lane's drain, or the pass
// began with keys held or batches to resend (clean false).
func (e *Exporter) passGoesOn(ctx context.Context, t target, cur Cursor, clean bool) func() bool {
	lc, ok := cur.(*laneCursor)
	if t.goOn == nil || !clean || !ok {
		return nil
	}
	longest := e.now().Add(lanePassLongest)
	return func() bool {
		return e.now().Before(longest) && lc.goesOn() && t.goOn(ctx)
	}
}

// laneGoesOn is a lane's drain's goOn (target.goOn): its job keeps its
// slot and its lane, the daemon is not stopping, and the snapshot's
// chunks are done (snapshotDone as the pass began).
func (e *Exporter) laneGoesOn(r *run, name string, snapshotDone bool) func(context.Context) bool {
	return func(ctx context.Context) bool {
		return snapshotDone && !e.isStopping() && !e.runOver(ctx, r.started) && !e.shares.wouldLeave(ctx, name, r.started)
	}
}

// goesOn reports whether the cursor's pass may go on past its time: no
// tenant was read to its end (a change to a key behind its cursor waits
// for the next pass: a tenant with little to send keeps 2 s passes), is
// left out until the pass's end or set aside, and no batch of the pass
// left its rows to be read again.
func (c *laneCursor) goesOn() bool {
	if c.drained {
		return false
	}
	for _, until := range c.out {
		if until.IsZero() {
			return false
		}
	}
	return !c.f.leftBehind() && len(c.f.asideTenants()) == 0
}

// leaveBehind notes a batch of this pass answered with its rows (some
// of them) not taken: they are read again by the next pass, which must
// then come at its time.
func (f *laneFeed) leaveBehind() {
	f.mu.Lock()
	f.behind = true
	f.mu.Unlock()
}

func (f *laneFeed) leftBehind() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.behind
}
