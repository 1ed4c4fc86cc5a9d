package soak

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// failing are the API faults that fail requests: while one lasts, a
// source may legitimately make no progress (its breaker opens, its
// retries back off), as in an outage; latency and slow answers do not
// hold it.
var failing = map[string]bool{api5xx: true, api429Bare: true, api429Retry: true, apiReset: true}

// hold is a stretch of the run in which a fault of the schedule
// legitimately holds a source's export, or some of its keys: the stall
// check starts counting once it ends.
type hold struct {
	from, to time.Duration
	source   string            // "" for every source, resources included
	keys     func(string) bool // nil for every key of the source; else the keys held
}

func (r *run) hold(h hold) {
	r.stallMu.Lock()
	defer r.stallMu.Unlock()
	r.holds = append(r.holds, h)
}

// holdsOf returns whether the source is held whole at t, and the key
// holds under way at t.
func (r *run) holdsOf(source string, t time.Duration) (bool, []func(string) bool) {
	r.stallMu.Lock()
	defer r.stallMu.Unlock()
	var keys []func(string) bool
	for _, h := range r.holds {
		if t < h.from || t > h.to || (h.source != "" && h.source != source) {
			continue
		}
		if h.keys == nil {
			return true, nil
		}
		keys = append(keys, h.keys)
	}
	return false, keys
}

// sourceProgress is the stall check's state of one source.
type sourceProgress struct {
	pending  map[int64]bool // the changes pending at the last look that no hold covers
	since    time.Duration  // the last progress, or the end of a hold, or the first change pending
	keyHolds int            // the key holds under way at the last look
	stalled  bool           // a stall was reported and has not ended
}

// resourcesSource names the export of resources in the stall check.
const resourcesSource = "resources"

// stallWatch is the state of the stall check of every source.
type stallWatch struct {
	sources  map[string]*sourceProgress
	synced   time.Time     // resources' latest mark seen
	lastLook time.Duration // the previous look
}

// anyDaemonRuns reports whether some daemon runs neither frozen nor down
// (a daemon signalled to stop counts as down from the signal: it takes no
// job while it shuts down).
func (r *run) anyDaemonRuns() bool {
	for _, d := range r.daemons {
		d.mu.Lock()
		runs := d.cmd != nil && !d.down && !d.stopped
		d.mu.Unlock()
		if runs {
			return true
		}
	}
	return false
}

// lookStalls is one look of the stall check: for every source, a change
// pending at the previous look that is gone now (marked synced or failed)
// is progress; pending changes and no progress for StallTarget, counted
// from the end of any hold of the source, is a stall, a violation. Changes
// of keys a per-item fault holds are left out while it does, so the keys
// it does not hold must keep moving. A look the database does not answer
// is skipped, and the time it is down counts.
func (r *run) lookStalls(ctx context.Context, w *stallWatch) {
	if w.sources == nil {
		w.sources = map[string]*sourceProgress{}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	now := r.since()
	// With every daemon frozen or down the faults together hold every
	// source: takeover is a live daemon's (seed 911096515: daemon 1's
	// SIGTERM took its 10 s shutdown timeout, from 35.5 s, while the
	// other two were frozen from 39.4 and 41.4 s). The target counts from
	// the first look a daemon runs again.
	if !r.anyDaemonRuns() {
		r.hold(hold{from: w.lastLook, to: now})
	}
	w.lastLook = now
	for _, name := range append([]string{resourcesSource}, soakSources...) {
		if name == sourceTickets {
			// A tenant's rows wait while it is unconnected or its token
			// revoked: waiting is their contract, not a stall.
			continue
		}
		p := w.sources[name]
		if p == nil {
			p = &sourceProgress{since: now}
			w.sources[name] = p
		}
		whole, keyHolds := r.holdsOf(name, now)
		var pending map[int64]bool
		var progress bool
		var err error
		if name == resourcesSource {
			pending, progress, err = r.resourcesProgress(ctx, w)
		} else {
			pending, err = r.pendingChanges(ctx, name, keyHolds)
		}
		if err != nil {
			continue
		}
		// resources' rows leave the pending set when deleted too: only
		// their marks' times count there.
		if !progress && name != resourcesSource {
			progress = p.settled(pending)
		}
		if ended, d := p.look(now, pending, progress, whole, len(keyHolds)); ended > 0 {
			r.rep.sourceStall(name, now-ended, ended)
		} else if d > 0 {
			r.rep.violate(now, fmt.Sprintf("source %s: no row marked for %s with %d changes pending, outside any fault that holds it (since %s; target %s)",
				name, d.Round(time.Second), len(pending), p.since.Round(time.Second), StallTarget))
		}
	}
}

// settled reports whether a change pending at the last look is gone.
func (p *sourceProgress) settled(pending map[int64]bool) bool {
	for seq := range p.pending {
		if !pending[seq] {
			return true
		}
	}
	return false
}

// look takes one look at a source: the changes pending now outside its
// key holds, whether any was settled since the last look, whether a fault
// holds the whole source, and how many key holds are under way. It
// returns the length of a stretch without progress that ends now (for the
// report), or, once a stretch passes StallTarget, its length, once.
func (p *sourceProgress) look(now time.Duration, pending map[int64]bool, progress, whole bool, keyHolds int) (ended, stalled time.Duration) {
	defer func() {
		p.keyHolds = keyHolds
		p.pending = pending
		if whole {
			p.pending = nil
		}
	}()
	if whole || keyHolds != p.keyHolds || progress || len(p.pending) == 0 {
		// Held, a key hold began or ended, moving, or nothing was
		// pending: the clock starts again.
		if len(p.pending) > 0 {
			ended = now - p.since
		}
		p.since, p.stalled = now, false
		return ended, 0
	}
	if now-p.since > StallTarget && !p.stalled {
		p.stalled = true
		return 0, now - p.since
	}
	return 0, 0
}

// pendingChanges lists the source's pending changes (their seq) whose keys
// no key hold covers. A change leaves the log only when it is marked
// synced or failed, so one that is gone is a row the daemons settled.
func (r *run) pendingChanges(ctx context.Context, source string, keyHolds []func(string) bool) (map[int64]bool, error) {
	rows, err := r.pool.Query(ctx, `SELECT seq, key FROM syncer_changes WHERE source = $1 LIMIT 100000`, source)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var seq int64
		var key string
		if err := rows.Scan(&seq, &key); err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(keyHolds, func(held func(string) bool) bool { return held(key) }) {
			out[seq] = true
		}
	}
	return out, rows.Err()
}

// resourcesProgress reports resources' rows pending (by id and version)
// and whether a row was marked since the last look.
func (r *run) resourcesProgress(ctx context.Context, w *stallWatch) (map[int64]bool, bool, error) {
	var latest *time.Time
	if err := r.pool.QueryRow(ctx, `SELECT max(greatest(synced_at, failed_at)) FROM resources`).Scan(&latest); err != nil {
		return nil, false, err
	}
	progress := latest != nil && latest.After(w.synced)
	if progress {
		w.synced = *latest
	}
	rows, err := r.pool.Query(ctx, `SELECT id FROM resources WHERE synced_at IS NULL AND failed_at IS NULL LIMIT 100000`)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, false, err
		}
		out[id] = true
	}
	return out, progress, rows.Err()
}
