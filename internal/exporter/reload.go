package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
)

// Reloads, and jobs that do not return. A reload swaps the sources exported
// here (Swap) while the exporter and its River client keep running: the
// sources it left as they were keep their jobs, their deliverers and what
// those learned; only the jobs of the sources it changed or removed are
// asked to stop (Stop), so that their next run takes the new configuration.
//
// A job is asked to stop by cancelling its context, and is waited for
// AbandonAfter at most. One that does not return by then (a response
// program that spins, a call that ignores its context) is abandoned: logged
// at error with its source, destination and how long it ran; its locks are
// given up (locks.Lock.Abandon: nothing more is sent or marked on their
// behalf, and their sessions end, so another job takes them over at once,
// or when their lease runs out); what it held in this process (a linger
// slot, its source's wake-ups, its destination's turn) is handed back; and
// River's worker slot is freed, the job snoozed to run again. Its goroutine
// is left to itself. Its batch in flight was recorded before it went, so
// the next holder of the lock resends it under the same Idempotency-Key:
// never two pushes of one key at once, since the abandoned one can no
// longer send (its lock refuses) and the new one starts only once that
// lock is free.

// ErrReconfigured is the cause of a job's cancellation by a reload that
// changed its source or its destination.
var ErrReconfigured = errors.New("exporter: the source's configuration changed")

// job is one running job, as a reload and the shutdown see it.
type job struct {
	source  string
	dest    string
	started time.Time
	// share bounds the lanes of its source the daemon runs as it starts
	// (laneShare); 0 for none.
	share  int
	cancel context.CancelCauseFunc
	// done is closed when the job's work returned; gone when it was
	// abandoned.
	done     chan struct{}
	gone     chan struct{}
	goneOnce sync.Once

	mu sync.Mutex
	// locks are the locks it holds now, true for its destination's.
	locks map[*locks.Lock]bool
	// lingering: it holds a linger slot.
	lingering bool
	abandoned bool
}

// runningJobs are the jobs running here, so that a reload can stop those
// of the sources it changed.
type runningJobs struct {
	mu sync.Mutex
	m  map[*job]struct{}
}

func (r *runningJobs) add(j *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[*job]struct{}{}
	}
	r.m[j] = struct{}{}
}

func (r *runningJobs) remove(j *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, j)
}

// of returns the jobs running here of the sources in names.
func (r *runningJobs) of(names map[string]bool) []*job {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*job
	for j := range r.m {
		if names[j.source] {
			out = append(out, j)
		}
	}
	return out
}

type jobKey struct{}

// jobOf returns the job ctx runs in, nil outside one (tests that call
// work directly).
func jobOf(ctx context.Context) *job {
	j, _ := ctx.Value(jobKey{}).(*job)
	return j
}

// laneShare is the job's bound on its daemon's lanes (job.share), 0
// outside a job.
func (j *job) laneShare() int {
	if j == nil {
		return 0
	}
	return j.share
}

// tookLock notes a lock the job took; dest marks its destination's.
func (j *job) tookLock(lk *locks.Lock, dest bool) {
	if j == nil || lk == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.locks[lk] = dest
}

// gaveLock notes a lock the job gave back.
func (j *job) gaveLock(lk *locks.Lock) {
	if j == nil || lk == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.locks, lk)
}

// takeLingerSlot takes a linger slot for ctx's job, if one is free.
func (e *Exporter) takeLingerSlot(ctx context.Context) bool {
	if !e.lingerSlots.TryAcquire() {
		return false
	}
	if j := jobOf(ctx); j != nil {
		j.mu.Lock()
		j.lingering = true
		j.mu.Unlock()
	}
	return true
}

// giveLingerSlot gives it back, unless its job was abandoned, which gave
// it back then.
func (e *Exporter) giveLingerSlot(ctx context.Context) {
	if j := jobOf(ctx); j != nil {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.abandoned || !j.lingering {
			return
		}
		j.lingering = false
	}
	e.lingerSlots.Release()
}

// sourcesNow returns the sources exported here; the map is never edited.
func (e *Exporter) sourcesNow() map[string]exported {
	if m := e.srcs.Load(); m != nil {
		return *m
	}
	return nil
}

// Swap replaces the sources exported here by list, as a reload does, and
// returns the names of those it changed (another destination or
// deliverer, definition or batch size) or removed: their running jobs go
// on with what they started with until Stop. Jobs started from now on run
// list's. On error nothing is replaced.
func (e *Exporter) Swap(list []Source) (changed []string, err error) {
	next, err := e.family(list)
	if err != nil {
		return nil, err
	}
	var prev map[string]exported
	if p := e.srcs.Swap(&next); p != nil {
		prev = *p
	}
	e.announce(next)
	for name, p := range prev {
		n, ok := next[name]
		if !ok || !sameSource(p.base(), n.base()) {
			changed = append(changed, name)
		}
	}
	return changed, nil
}

// sameSource reports whether a job of a would run b just the same.
func sameSource(a, b *Source) bool {
	return a.Destination == b.Destination && a.DestinationName == b.DestinationName &&
		a.BatchSize == b.BatchSize && a.name == b.name && a.Tenants == b.Tenants && reflect.DeepEqual(a.settings, b.settings)
}

// Stop asks the running jobs of names to stop (their context is cancelled
// with ErrReconfigured), waits for them until AbandonAfter has passed,
// abandons those still running then, and returns the sources it abandoned
// jobs of.
// Each stopped job snoozes and runs again at once, with the sources as
// they are now.
func (e *Exporter) Stop(ctx context.Context, names []string) []string {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	running := e.jobs.of(want)
	for _, j := range running {
		j.cancel(ErrReconfigured)
	}
	deadline := time.NewTimer(e.cfg.AbandonAfter)
	defer deadline.Stop()
	late := false
	var abandoned []string
	for _, j := range running {
		if !late {
			select {
			case <-j.done:
				continue
			case <-j.gone:
				continue
			case <-deadline.C:
				late = true
			}
		}
		select {
		case <-j.done:
		default:
			e.abandon(ctx, j, e.cfg.AbandonAfter, "a reload changed its source or its destination")
			abandoned = append(abandoned, j.source)
		}
	}
	return abandoned
}

// supervised runs work for River: in a goroutine of its own, registered
// so that a reload can stop it, and given up on AbandonAfter after it was
// asked to stop (by a reload, or by River's cancellation at the end of the
// shutdown timeout).
func (e *Exporter) supervised(ctx context.Context, name string, share int) error {
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(context.Canceled)
	j := &job{source: name, started: time.Now(), share: share, cancel: cancel,
		done: make(chan struct{}), gone: make(chan struct{}), locks: map[*locks.Lock]bool{}}
	if s, ok := e.sourcesNow()[name]; ok {
		j.dest = s.base().DestinationName
	}
	e.jobs.add(j)
	defer e.jobs.remove(j)
	var err error
	go func() {
		defer close(j.done)
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("exporter: job of source %s panicked: %v\n%s", name, r, debug.Stack())
			}
		}()
		err = e.work(context.WithValue(jctx, jobKey{}, j), name)
	}()
	select {
	case <-j.done:
		if errors.Is(context.Cause(jctx), ErrReconfigured) {
			return river.JobSnooze(0)
		}
		return err
	case <-j.gone:
		return river.JobSnooze(0)
	case <-ctx.Done():
	}
	// River cancelled the job: the shutdown timeout has passed.
	cancel(context.Cause(ctx))
	bound := time.NewTimer(e.cfg.AbandonAfter)
	defer bound.Stop()
	select {
	case <-j.done:
		return err
	case <-j.gone:
	case <-bound.C:
		e.abandon(context.WithoutCancel(ctx), j, e.cfg.AbandonAfter, "the daemon is shutting down")
	}
	return river.JobSnooze(0)
}

// abandon gives up on j, which did not return within bound of being asked
// to stop: see the top of this file.
func (e *Exporter) abandon(ctx context.Context, j *job, bound time.Duration, why string) {
	first := false
	j.goneOnce.Do(func() { first = true })
	if !first {
		return
	}
	j.mu.Lock()
	j.abandoned = true
	held := j.locks
	j.locks = map[*locks.Lock]bool{}
	lingering := j.lingering
	j.lingering = false
	j.mu.Unlock()
	e.logger.ErrorContext(ctx, "exporter: a job did not return after it was asked to stop; it is left running, no longer waited on: "+
		"its locks are given up, and its batch in flight, recorded, is resent under the same key by the next holder",
		slog.String("source", j.source), slog.String("destination", j.dest), slog.String("why", why),
		slog.Duration("running_for", time.Since(j.started).Round(time.Millisecond)), slog.Duration("waited", bound))
	metricSource := j.source
	if src, _, lane := jobs.LaneOf(j.source); lane {
		metricSource = src
	}
	e.metrics.JobAbandoned(metricSource, j.dest)
	destHeld := false
	for lk, dest := range held {
		lk.Abandon()
		destHeld = destHeld || dest
	}
	if lingering {
		e.lingerSlots.Release()
	}
	// Its wake-ups go to the source's next job, not to it.
	e.wakers.forget(j.source)
	// Its turn at its destination: no longer held or wanted by it; the
	// jobs waiting for it try again.
	ts := &e.turns
	ts.mu.Lock()
	delete(ts.wants[j.dest], j.source)
	if destHeld {
		delete(ts.held, j.dest)
	}
	var waiting []string
	for src := range ts.wants[j.dest] {
		waiting = append(waiting, src)
	}
	ts.mu.Unlock()
	for _, src := range waiting {
		e.Wake(src)
	}
	// It may have shut the gate as it lingered hot: open it (an open gate
	// is always safe), off this goroutine, which must not wait.
	go func() { _, _ = e.gate.noteCold(ctx, j.source) }()
	close(j.gone)
}
