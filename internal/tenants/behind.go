package tenants

import (
	"context"
	"log/slog"
	"time"
)

// What a registry does while the tenants query cannot run (docs/protocol.md
// section 10.1, "The query never holds the export"): a tenant with a
// deliverer reads its row behind its batches, and one read at a time
// tells when the query runs again.

// refreshBehind reads e's row again without holding its batches: in a
// goroutine of its own when a slot of the gate is free now, the result
// applied when it comes. At most one read per tenant, and no more than the
// gate's slots in all; none within QueryRetry of a read of it that could
// not run. While the query is down, only the registry's probe runs: one
// read at a time, at most one every QueryRetry, whichever tenant asks.
// The caller holds e.mu.
func (r *Registry) refreshBehind(e *entry, now time.Time) {
	if e.reading {
		return
	}
	// While the query cannot run, one read at a time tells when it can
	// again: the others would each hold a connection in the lock's
	// queue for tenants.timeout and tell nothing more.
	probe := r.down(now) != nil
	switch {
	case probe && !r.startProbe(now):
		return
	case !probe && !e.failedAt.IsZero() && now.Sub(e.failedAt) < QueryRetry:
		return
	}
	if !r.cfg.Queries.try() {
		if probe {
			r.endProbe()
		}
		return
	}
	e.reading = true
	reads := e.reads
	r.behind.Add(1)
	go func() {
		defer r.behind.Done()
		ctx := r.behindCtx
		conn, err := r.read(ctx, e.tenant)
		r.cfg.Queries.release()
		if probe {
			r.endProbe()
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.reading = false
		if e.reads != reads || ctx.Err() != nil {
			return // read since, in For's own time; or the registry closed
		}
		_ = r.apply(ctx, e, r.cfg.Now(), conn, err)
	}()
}

// down is why the query could not run, from its last failure to run
// until a read succeeds; nil otherwise.
func (r *Registry) down(time.Time) error {
	r.downMu.Lock()
	defer r.downMu.Unlock()
	return r.downErr
}

// setDown records that the query could not run (err), or, with a nil
// err, that it ran.
func (r *Registry) setDown(err error) {
	r.downMu.Lock()
	defer r.downMu.Unlock()
	r.downErr = err
}

// startProbe takes the registry's one probe while the query is down: none
// running, and the last started QueryRetry ago or more.
func (r *Registry) startProbe(now time.Time) bool {
	r.downMu.Lock()
	defer r.downMu.Unlock()
	if r.probing || (!r.probeAt.IsZero() && now.Sub(r.probeAt) < QueryRetry) {
		return false
	}
	r.probing, r.probeAt = true, now
	return true
}

func (r *Registry) endProbe() {
	r.downMu.Lock()
	defer r.downMu.Unlock()
	r.probing = false
}

// queryWarn logs a query that could not run: at WARN once a minute for
// the registry (a locked table fails every tenant's read alike), at
// DEBUG otherwise.
func (r *Registry) queryWarn(ctx context.Context, e *entry, err error) {
	level := slog.LevelDebug
	now := time.Now().UnixNano()
	if last := r.warnedAt.Load(); now-last >= int64(time.Minute) && r.warnedAt.CompareAndSwap(last, now) {
		level = slog.LevelWarn
	}
	r.logger.Log(ctx, level, "tenants: the tenants query could not run; tenants whose credentials are held go on with them, the others' rows wait",
		slog.String("tenant", e.tenant), slog.String("error", err.Error()))
}
