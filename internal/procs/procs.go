// Package procs sizes the Go scheduler (GOMAXPROCS) to the daemon's load.
//
// A daemon that exports a few hundred rows a second does little work in
// many small pieces: a read, a push, a marker transaction, each a goroutine
// woken by the network and handing its result to another. With more than
// one P, each hand-off wakes an idle P's thread, which spins looking for
// work, finds none and sleeps again (futex calls and the scheduler's
// search): on the project's 2-core machine that was a third of the
// daemon's CPU samples at 500 rows a second, and one P spent less CPU per
// exported row (docs/benchmarks.md, "One P while the load is light"). A
// webhook storm needs every P: one P cost the webhooks row a third of its
// requests a second. So the Governor runs the daemon on one P while it
// uses little CPU and gives it every P as soon as it uses most of that
// one.
//
// The decision reads the process's own CPU time (getrusage), not the
// runtime's estimates: spinning is exactly what those leave out. Each
// reading is a timer's wake and a system call, which on the project's
// machine cost an idle daemon a third to half of its CPU at one every
// 20 ms; so while the process is idle on one P the readings space out,
// and the first one that sees work brings them back (docs/design.md, "One
// P while the load is light").
package procs

import (
	"cmp"
	"context"
	"log/slog"
	"runtime"
	"time"
)

// Defaults for Config.
const (
	IntervalDefault     = 20 * time.Millisecond
	IdleIntervalDefault = 320 * time.Millisecond
	IdleBelowDefault    = 0.02
	RaiseDefault        = 0.7
	LowerDefault        = 0.5
	LowerAfterDefault   = time.Second
)

// Config configures a Governor.
type Config struct {
	// Max is the most Ps given, and what is left set when Run returns.
	// Defaults to runtime.GOMAXPROCS(0) when New is called: Go's own
	// choice, which follows a container's CPU limit.
	Max int
	// Interval is how often the process's CPU time is read. Defaults to
	// IntervalDefault.
	Interval time.Duration
	// IdleInterval is the longest wait between readings. While the process
	// is on one P and uses under IdleBelow cores, each wait doubles, from
	// Interval up to this; any reading at or over IdleBelow goes back to
	// Interval. A burst after an idle spell so runs on one P for at most
	// about IdleInterval. Defaults to IdleIntervalDefault.
	IdleInterval time.Duration
	// IdleBelow is the use, in cores, under which the process counts as
	// idle: its timers and nothing else. Defaults to IdleBelowDefault.
	IdleBelow float64
	// Raise: one interval in which the process used this share of its Ps'
	// time gives it Max Ps at once. Defaults to RaiseDefault: a daemon on
	// one P that keeps it 70% busy is queueing work.
	Raise float64
	// Lower: the process goes back to one P once it has used less than
	// this many cores for LowerAfter. Defaults to LowerDefault, below
	// Raise so that a load that is raised stays raised: what it uses on
	// one P it uses at least on more.
	Lower float64
	// LowerAfter is how long the use must stay under Lower. Defaults to
	// LowerAfterDefault.
	LowerAfter time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger

	// CPU reads the process's CPU time; Set sets the Ps and Now reads the
	// clock. Tests stub them; they default to getrusage,
	// runtime.GOMAXPROCS and time.Now.
	CPU func() (time.Duration, bool)
	Set func(int)
	Now func() time.Time
}

// Governor adapts GOMAXPROCS to the load. Run it once per process.
type Governor struct {
	cfg   Config
	procs int
	// quietSince is when the use went under Lower, zero while it is not.
	quietSince time.Time
}

// New returns a Governor with cfg's defaults filled in.
func New(cfg Config) *Governor {
	cfg.Max = cmp.Or(cfg.Max, runtime.GOMAXPROCS(0))
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.IdleInterval = max(cmp.Or(cfg.IdleInterval, IdleIntervalDefault), cfg.Interval)
	cfg.IdleBelow = cmp.Or(cfg.IdleBelow, IdleBelowDefault)
	cfg.Raise = cmp.Or(cfg.Raise, RaiseDefault)
	cfg.Lower = cmp.Or(cfg.Lower, LowerDefault)
	cfg.LowerAfter = cmp.Or(cfg.LowerAfter, LowerAfterDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CPU == nil {
		cfg.CPU = processCPU
	}
	if cfg.Set == nil {
		cfg.Set = func(n int) { runtime.GOMAXPROCS(n) }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Governor{cfg: cfg, procs: cfg.Max}
}

// Run adapts the Ps until ctx is done, then gives back Max. It starts
// with Max: a daemon that starts with a backlog drains it at full speed
// from its first row, and one that starts idle goes to one P a second
// later. Without more than one P to give, or without a
// reading of the process's CPU time, it does nothing.
func (g *Governor) Run(ctx context.Context) {
	if g.cfg.Max <= 1 {
		return
	}
	last, ok := g.cfg.CPU()
	if !ok {
		return
	}
	defer g.cfg.Set(g.cfg.Max)
	lastAt := g.cfg.Now()
	wait := g.cfg.Interval
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := g.cfg.Now()
		used, ok := g.cfg.CPU()
		wall := now.Sub(lastAt)
		if ok && wall > 0 {
			cores := (used - last).Seconds() / wall.Seconds()
			last, lastAt = used, now
			if before := g.procs; g.step(cores, now) != before {
				g.cfg.Set(g.procs)
				g.cfg.Logger.DebugContext(ctx, "procs: GOMAXPROCS changed", slog.Int("from", before), slog.Int("to", g.procs),
					slog.Float64("cores_used", cores))
			}
			wait = g.next(cores, wait)
		}
		t.Reset(wait)
	}
}

// next returns the wait before the reading after one that measured cores,
// given the wait before it.
func (g *Governor) next(cores float64, wait time.Duration) time.Duration {
	if g.procs == 1 && cores < g.cfg.IdleBelow {
		return min(2*wait, g.cfg.IdleInterval)
	}
	return g.cfg.Interval
}

// step takes one interval's use, in cores, and returns the Ps to run with.
func (g *Governor) step(cores float64, now time.Time) int {
	if g.procs < g.cfg.Max {
		if cores >= g.cfg.Raise*float64(g.procs) {
			g.procs, g.quietSince = g.cfg.Max, time.Time{}
		}
		return g.procs
	}
	if cores >= g.cfg.Lower {
		g.quietSince = time.Time{}
		return g.procs
	}
	if g.quietSince.IsZero() {
		g.quietSince = now
	}
	if now.Sub(g.quietSince) >= g.cfg.LowerAfter {
		g.procs, g.quietSince = 1, time.Time{}
	}
	return g.procs
}
