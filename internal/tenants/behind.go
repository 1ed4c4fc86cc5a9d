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

const (
	// ReadFresh is how long a read of a connected tenant's row stands for
	// the batches after it: while the query runs, the row is read again
	// right before a batch that comes later (readBefore), so a revoked
	// connection holds the next batch, at one query a second at most per
	// tenant sending.
	ReadFresh = time.Second
	// ReadBeforeWait bounds a batch's wait for that read: past it the
	// batch goes with the credentials held (the query never holds the
	// export), the read applied behind it.
	ReadBeforeWait = 500 * time.Millisecond
)

// refreshBehind reads e's row again without holding its batches: in a
// goroutine of its own when a slot of the gate is free now, the result
// applied when it comes. At most one read per tenant, and no more than the
// gate's slots in all; none within QueryRetry of a read of it that could
// not run. While the query is down, only the registry's probe runs: one
// read at a time, at most one every QueryRetry, whichever tenant asks.
// With before, the result is handed to the For waiting for it
// (readBefore), if it still waits, rather than applied here. It reports
// whether a read started. The caller holds e.mu.
func (r *Registry) refreshBehind(e *entry, now time.Time, before chan<- readResult) bool {
	if e.reading {
		return false
	}
	// While the query cannot run, one read at a time tells when it can
	// again: the others would each hold a connection in the lock's
	// queue for tenants.timeout and tell nothing more.
	probe := r.down(now) != nil
	switch {
	case probe && !r.startProbe(now):
		return false
	case !probe && !e.failedAt.IsZero() && now.Sub(e.failedAt) < QueryRetry:
		return false
	}
	if !r.cfg.Queries.try() {
		if probe {
			r.endProbe()
		}
		return false
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
		if before != nil {
			select {
			case before <- readResult{conn: conn, err: err, reads: reads}:
				return // the For that waits applies it
			default:
			}
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.reading = false
		if e.reads != reads || ctx.Err() != nil {
			return // read since, in For's own time; or the registry closed
		}
		_ = r.apply(ctx, e, r.cfg.Now(), conn, err)
	}()
	return true
}

// readResult is a read of a tenant's row handed to the For waiting for
// it: reads is the entry's count of reads applied when it started.
type readResult struct {
	conn  *connection
	err   error
	reads int
}

// readBefore reads e's row right before a batch of a tenant whose
// credentials are held (docs/destinations.md, "Tenants"): a revoked
// connection then holds the very next batch rather than one 30 to 45 s
// later. The read is one refreshBehind starts; the batch waits for it at
// most ReadBeforeWait, and goes with the credentials held when it does not
// come by then (a locked table, a slow query: the query never holds the
// export), the read then applied behind. It reports whether the read's
// result was applied. The caller holds e.mu; it is let go while waiting.
func (r *Registry) readBefore(ctx context.Context, e *entry, now time.Time) bool {
	res := make(chan readResult)
	if !r.refreshBehind(e, now, res) {
		return false
	}
	e.mu.Unlock()
	t := time.NewTimer(ReadBeforeWait)
	var got readResult
	ok := false
	select {
	case got = <-res:
		ok = true
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	e.mu.Lock()
	if !ok {
		return false
	}
	e.reading = false
	if e.reads != got.reads {
		return false // read since, in another For's own time
	}
	_ = r.apply(ctx, e, r.cfg.Now(), got.conn, got.err)
	return true
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
