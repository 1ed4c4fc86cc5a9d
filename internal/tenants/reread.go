package tenants

import (
	"context"
	"errors"
	"time"

	"golang.org/x/time/rate"
)

// rereadBatch is how many idle tenants' rows Reread reads in one round
// trip (at most RereadRate's burst).
const rereadBatch = 25

// Reread reads again the rows of the tenants the registry holds that
// were not read within RefreshEvery: a tenant with nothing to send is
// asked for by no batch, and its row would be read only at its next
// change, so its new account (a url or account column that changed)
// would get its live rows only then. Run every half RefreshEvery, it
// gives an idle tenant's account change its replay within 1.5 times
// RefreshEvery, for as long
// as the registry holds the tenant (IdleAfter); a tenant it forgot is
// compared at its next read. It reads nothing without Settings or
// Replay, and never keeps a tenant longer. It reads at most RereadRate
// rows a second, so a registry holding many idle tenants costs the
// database and the daemon a bounded share, and takes longer to go
// round them all.
//
// The rows are read rereadBatch at a time, in one round trip (readMany),
// where each was a transaction of its own: 10,000 idle tenants were
// 50 reads a second, each waking the daemon and making its own round
// trips, a third of an idle daemon's CPU (issue 54).
func (r *Registry) Reread(ctx context.Context) {
	if r.cfg.Settings == nil || r.cfg.Replay == nil {
		return
	}
	burst := max(1, int(r.cfg.RereadRate))
	pace := rate.NewLimiter(rate.Limit(r.cfg.RereadRate), burst)
	r.mu.Lock()
	held := make([]*entry, 0, len(r.entries))
	for _, e := range r.entries {
		held = append(held, e)
	}
	r.mu.Unlock()
	var due []*entry
	now := r.cfg.Now()
	for _, e := range held {
		e.mu.Lock()
		if r.rereadDue(e, now) {
			due = append(due, e)
		}
		e.mu.Unlock()
	}
	for len(due) > 0 && ctx.Err() == nil {
		n := min(len(due), rereadBatch, burst)
		if pace.WaitN(ctx, n) != nil {
			return
		}
		k, down := r.rereadSome(ctx, due[:n])
		if down {
			// The query could not run (a table locked by a migration, the
			// database away): the rest wait for the next pass, rather than
			// each hold a slot of the gate for tenants.timeout, one round
			// trip after another, to learn the same.
			return
		}
		if k == 0 {
			k = n // none read (the gate busy): they wait for the next pass
		}
		due = due[k:]
	}
}

// rereadDue reports whether e's row is due a read of Reread's at now: read
// before, not within RefreshEvery, and no read of it running. The caller
// holds e.mu.
func (r *Registry) rereadDue(e *entry, now time.Time) bool {
	return !e.readAt.IsZero() && now.Sub(e.readAt) >= r.cfg.RefreshEvery && !e.reading
}

// rereadSome reads the rows of es in one round trip and applies each
// read to its entry unless another read of it was applied meanwhile (a
// batch's For). It returns how many of es were read: the query failing
// for one tenant ends the round trip's transaction there, and the rest
// are read in the next; and whether the query could not run (couldNotRun).
func (r *Registry) rereadSome(ctx context.Context, es []*entry) (int, bool) {
	now := r.cfg.Now()
	tenants := make([]string, len(es))
	reads := make([]int, len(es))
	for i, e := range es {
		e.mu.Lock()
		tenants[i], reads[i] = e.tenant, e.reads
		e.mu.Unlock()
	}
	if r.cfg.Queries.wait(ctx, QueryWait) != nil {
		return 0, false
	}
	got := r.readMany(ctx, tenants)
	r.cfg.Queries.release()
	for i, res := range got {
		e := es[i]
		e.mu.Lock()
		if e.reads == reads[i] && r.rereadDue(e, now) {
			_ = r.apply(ctx, e, now, res.conn, res.err) // logged there; the next read tries again
		}
		e.mu.Unlock()
	}
	return len(got), couldNotRun(got[len(got)-1].err)
}

// couldNotRun reports whether err, a read's, says the query could not run
// (a timeout, a lock, the database away) rather than what it gave for the
// tenant (a row that cannot be used, a query that fails for it).
func couldNotRun(err error) bool {
	var re *rowError
	var qe *QueryError
	return err != nil && !errors.As(err, &re) && !(errors.As(err, &qe) && !qe.Transient())
}
