package exporter

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/jobs"
)

// Turns at the worker slots. A job holds a River worker slot for its whole
// run: while rows keep coming faster than its destination takes them it
// drains and lingers until MaxRun (30 s). A daemon left alone after its
// peers froze or died carries every source, often more than its slots, and
// the sources it takes over from a frozen holder (docs/design.md,
// "Takeover") waited for a slot until some job here reached MaxRun: 20 s
// past the lease in the soak's seed 911096515. So a job that has run
// slotTurn gives its slot up, as at MaxRun, when a job of another source
// has waited for one longer than slotWaitAfter: River's fetch poll is
// 200 ms, so such a job found no daemon with a free slot.

const (
	// slotTurn is the least a job runs before it gives its slot up for a
	// waiting job: a turn long enough that a job's start (its locks, its
	// resent batches) stays a small part of it.
	slotTurn = 5 * time.Second
	// slotWaitAfter is how long an available job must have waited to
	// count as waiting for a slot.
	slotWaitAfter = 2 * time.Second
	// slotYieldEvery spaces the jobs of this process that give way: one
	// gives way for a waiting job, which takes the slot on the next fetch;
	// the rest go on.
	slotYieldEvery = time.Second
	// slotLookEvery spaces the process's looks at the queue.
	slotLookEvery = 500 * time.Millisecond
)

// slotWait is the process's state of turns at the worker slots.
type slotWait struct {
	mu     sync.Mutex
	looked time.Time // the last look at the queue
	gave   time.Time // the last time a job here was told to give way
}

// runOver reports whether a job started at started should end now and
// come back through River: at MaxRun, or after slotTurn when a job waits
// for a slot (slotWanted).
func (e *Exporter) runOver(ctx context.Context, started time.Time) bool {
	return e.since(started) > e.cfg.MaxRun || e.slotGiven(ctx, started)
}

// slotGiven reports whether a job started at started has had its turn and
// a job of another source waits for a slot: the job gives its slot up.
func (e *Exporter) slotGiven(ctx context.Context, started time.Time) bool {
	return e.since(started) >= slotTurn && e.slotWanted(ctx)
}

// slotWanted reports whether an available job of a source with no job
// active here has waited longer than slotWaitAfter, and if so counts the
// caller as the job that gives way. A failed look is no wait.
func (e *Exporter) slotWanted(ctx context.Context) bool {
	s := &e.slotWait
	s.mu.Lock()
	defer s.mu.Unlock()
	now := e.now()
	if now.Sub(s.gave) < slotYieldEvery || now.Sub(s.looked) < slotLookEvery {
		return false
	}
	s.looked = now
	rows, err := e.pool.Query(ctx, `SELECT kind, args FROM river_job
		WHERE state = 'available' AND queue = $1 AND kind = ANY($2)
		AND scheduled_at < now() - make_interval(secs => $3)
		ORDER BY priority, scheduled_at, id LIMIT 50`,
		jobs.Queue, jobs.Kinds(), slotWaitAfter.Seconds())
	if err != nil {
		e.logger.DebugContext(ctx, "exporter: look for jobs waiting for a worker slot", slog.String("error", err.Error()))
		return false
	}
	defer rows.Close()
	wanted := false
	for rows.Next() {
		var kind string
		var args []byte
		if err := rows.Scan(&kind, &args); err != nil {
			return false
		}
		// A job of a source active here ends at once (worker.go): no
		// slot is wanted for it.
		if src, ok := jobs.SourceOfJob(kind, args); ok && !e.Active(src) {
			wanted = true
			break
		}
	}
	if wanted {
		s.gave = now
	}
	return wanted
}
