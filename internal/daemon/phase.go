package daemon

import (
	"context"
	"time"
)

// The daemon's periodic work (the presence's beat, the gauges, the
// history's tidy, verify's look for runs, the tenants' re-read, the
// tombstones' purge) ran on tickers all started in the same millisecond,
// just after River's, whose queue poll ticks every 2 s from its start.
// Every second or two three of them asked the pool for a connection at
// once, and the pool kept a third connection open for those bursts
// (docs/design.md, "Spreading the periodic work"). Each loop now ticks at
// its own offset within the second from the daemon's start, a slot of
// 125 ms apart from River's ticks and from each other, so that at idle one
// of them at most runs beside River's fetch poll. The offsets are relative
// to the daemon's own start: daemons started apart fall apart anyway.
const (
	phaseGauges   = 125 * time.Millisecond
	phasePresence = 250 * time.Millisecond // and 750 ms: presence.Beat is 500 ms
	phaseHistory  = 375 * time.Millisecond
	phaseVerify   = 500 * time.Millisecond
	phaseTenants  = 625 * time.Millisecond
	phasePurge    = 875 * time.Millisecond
)

// grid ticks at origin and every period after it: a time.Ticker whose
// first tick is placed. A tick missed (the work outlasted the period) is
// dropped, as a Ticker drops it, and the grid stays where it was.
type grid struct {
	origin time.Time
	period time.Duration
	t      *time.Timer
}

// newGrid ticks at origin (offset after the daemon's start) and every
// period after, from the next point after now.
func newGrid(origin time.Time, period time.Duration) *grid {
	g := &grid{origin: origin, period: period}
	g.t = time.NewTimer(g.untilNext(time.Now()))
	return g
}

// untilNext is the wait from now to the grid's next point after it.
func (g *grid) untilNext(now time.Time) time.Duration {
	since := now.Sub(g.origin)
	if since < 0 {
		return -since
	}
	return g.period - since%g.period
}

// C delivers the ticks; Next must be called after each one received.
func (g *grid) C() <-chan time.Time { return g.t.C }

// Next arms the grid for its next point after now.
func (g *grid) Next() { g.t.Reset(g.untilNext(time.Now())) }

func (g *grid) Stop() { g.t.Stop() }

// phased runs run once ctx has reached offset after the daemon's start:
// the loops of other packages start their tickers when they start, so
// their ticks fall at offset within the second. It returns at once when
// ctx ends first.
func (d *Daemon) phased(ctx context.Context, offset time.Duration, run func(context.Context)) {
	t := time.NewTimer(time.Until(d.started.Add(offset)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	run(ctx)
}
