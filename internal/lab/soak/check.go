package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
)

// pending is what is left to export: rows of resources and keys of the
// sources, asked of their owners.
func (r *run) pending(ctx context.Context) (int64, error) {
	counts, err := resources.CountAll(ctx, r.pool)
	if err != nil {
		return 0, err
	}
	n := counts.Unsynced - counts.Failed
	stats, err := sources.Stats(ctx, r.pool)
	if err != nil {
		return 0, err
	}
	for _, s := range stats {
		n += s.PendingKeys
		if s.Snapshot != sources.SnapshotDone {
			n++
		}
	}
	return n, nil
}

// watch checks what can be checked while the faults go on, every second:
// the third parties' counters of broken promises, a key that came with two
// bodies, rows marked synced that the third party never accepted, and
// stalls.
func (r *run) watch(ctx context.Context) {
	seen := map[string]int64{}
	bodyConflicts := map[*api]int{}
	nConflicts := 0
	var lastAccepted int64
	stallSince := time.Time{}
	lw := &lockWatch{}
	refused := map[string]bool{}
	sw := &stallWatch{}
	failedSeen := r.failedSeen
	named := map[string]*api{"resources' third party": r.live, "the sources' third party": r.crm,
		"search (elasticsearch)": r.search, "hub (custom)": r.hub, "hooks (standard-webhooks)": r.hooks}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			r.endStall(stallSince)
			return
		case <-tick.C:
		}
		var accepted int64
		for name, a := range named {
			st := a.fake.Stats()
			accepted += st.ItemsAccepted
			for what, n := range map[string]int64{
				"pairs accepted under two idempotency keys":             st.DuplicatesOtherKey,
				"requests reusing a key for other pairs":                st.KeyConflicts,
				"versions accepted below one already accepted":          st.OutOfOrder,
				"ids sent while an unanswered request held the same id": st.OverlappingIDs,
				// The fake's own count, in its formats' modes: a
				// webhook-id is a key the front does not read.
				"keys (Idempotency-Key, webhook-id) that came with two bodies": st.KeyBodyConflicts,
			} {
				k := name + ": " + what
				if n > seen[k] {
					r.rep.violate(r.since(), fmt.Sprintf("%s: %d (was %d)", k, n, seen[k]))
					seen[k] = n
				}
			}
			c := a.conflicts()
			for _, kc := range c[bodyConflicts[a]:] {
				nConflicts++
				r.rep.violate(r.since(), name+": "+kc.describe(a.format, r.start, r.dir, nConflicts))
			}
			bodyConflicts[a] = len(c)
		}
		// The tenants' accounts (tenants.go), as one third party.
		ts := r.tenantStats()
		accepted += ts.ItemsAccepted
		for what, n := range map[string]int64{
			"pairs accepted under two idempotency keys":    ts.DuplicatesOtherKey,
			"requests reusing a key for other pairs":       ts.KeyConflicts,
			"versions accepted below one already accepted": ts.OutOfOrder,
		} {
			k := "the tenants' accounts: " + what
			if n > seen[k] {
				r.rep.violate(r.since(), fmt.Sprintf("%s: %d (was %d)", k, n, seen[k]))
				seen[k] = n
			}
		}
		r.rep.Accepted = accepted
		if i%5 == 0 {
			r.checkMarks(ctx)
			r.checkFailures(ctx, failedSeen)
		}
		if i%3 == 0 {
			r.checkLock(ctx, lw)
		}
		if i%2 == 0 {
			r.lookStalls(ctx, sw)
			r.checkTokens(ctx, seen, refused)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		pending, err := r.pending(pctx)
		cancel()
		now := time.Now()
		switch {
		case accepted > lastAccepted || (err == nil && pending == 0):
			r.endStall(stallSince)
			stallSince = time.Time{}
		case stallSince.IsZero():
			stallSince = now
		}
		lastAccepted = accepted
	}
}

// endStall records a stall that began at since (zero: none) and ends now.
func (r *run) endStall(since time.Time) {
	if since.IsZero() {
		return
	}
	r.rep.stall(since.Sub(r.start), time.Since(since))
}

// checkFailures looks for keys of sources failed: no third party of the
// soak rejects anything, and a program broken for every row is the
// destination's configuration (held, its rows pending), so a failed key is
// a violation, reported once a source. Seen all along, since a later write
// of the key makes it pending again and clears its failure.
func (r *run) checkFailures(ctx context.Context, seen map[string]bool) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	rows, err := r.pool.Query(ctx, `SELECT DISTINCT ON (source) source, key, error, count(*) OVER (PARTITION BY source)
		FROM syncer_source_failures ORDER BY source, failed_at`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var source, key, why string
		var n int64
		if rows.Scan(&source, &key, &why, &n) != nil || seen[source] {
			continue
		}
		seen[source] = true
		r.rep.violate(r.since(), fmt.Sprintf("source %s: %d keys failed (key %s: %s), and its third party rejected none", source, n, key, why))
	}
}

// checkMarks compares the rows of resources marked synced with what its
// third party accepted: a mark without an acceptance is a lie.
func (r *run) checkMarks(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := r.pool.Query(ctx, `SELECT id, version FROM resources WHERE synced_at IS NOT NULL`)
	if err != nil {
		return
	}
	type pair struct{ id, version int64 }
	var marked []pair
	for rows.Next() {
		var p pair
		if rows.Scan(&p.id, &p.version) == nil {
			marked = append(marked, p)
		}
	}
	rows.Close()
	if rows.Err() != nil {
		return
	}
	acc := r.live.accepted()
	for _, p := range marked {
		if !acc[strconv.FormatInt(p.id, 10)][p.version] {
			r.rep.violate(r.since(), fmt.Sprintf("resources id %d version %d is marked synced, and its third party never accepted it", p.id, p.version))
			return
		}
	}
}

// drain waits, with no fault and no write, until nothing is pending and
// both third parties hold the database's last word on every key.
func (r *run) drain(ctx context.Context) {
	started := time.Now()
	deadline := started.Add(DrainTimeoutDefault)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, err := r.pending(ctx); err == nil && n == 0 && len(r.compare(ctx)) == 0 {
			r.rep.Drained = time.Since(started).Round(time.Second)
			return
		}
		sleep(ctx, time.Second)
	}
	r.rep.violate(r.since(), fmt.Sprintf("not drained %s after the last fault and write", DrainTimeoutDefault))
}

// finish runs the checks of the end: every key's last word, rows failed,
// and, once every daemon has been stopped with SIGTERM, no lock left held.
func (r *run) finish(ctx context.Context) {
	for _, v := range r.compare(ctx) {
		r.rep.violate(r.since(), v)
	}
	if counts, err := resources.CountAll(ctx, r.pool); err == nil && counts.Failed > 0 {
		r.rep.violate(r.since(), fmt.Sprintf("%d rows of resources failed, and the third party rejected none", counts.Failed))
	}
	r.checkFailures(ctx, r.failedSeen)
	for _, d := range r.daemons {
		d.mu.Lock()
		r.rep.Restarts += d.restarts
		d.mu.Unlock()
		if ok, why := d.terminate(30 * time.Second); !ok {
			r.rep.violate(r.since(), fmt.Sprintf("daemon %d on SIGTERM: %s", d.i, why))
		}
	}
	if r.pooler != nil {
		var died int
		r.rep.PoolerXacts, died = r.pooler.served(ctx)
		if died > 0 {
			r.rep.violate(r.since(), fmt.Sprintf("PgBouncer exited %d times by itself (its log: %s)", died, r.pooler.LogPath()))
		}
	}
	var held int64
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&held); err == nil && held > 0 {
		r.rep.violate(r.since(), fmt.Sprintf("%d advisory locks still held after every daemon stopped", held))
	}
	for _, a := range r.apis() {
		st := a.fake.Stats()
		r.rep.Requests += st.Requests
		r.rep.Pairs += st.DistinctPairs
		r.rep.Tombstones += st.Tombstones
		r.rep.KeyReplays += st.KeyReplays
	}
	ts := r.tenantStats()
	r.rep.Requests += ts.Requests
	r.rep.Pairs += ts.DistinctPairs
	r.rep.Tombstones += ts.Tombstones
	r.rep.KeyReplays += ts.KeyReplays
	r.rep.Tokens = r.tokenReport()
	for _, a := range r.apis() {
		for k, v := range a.injectedCounts() {
			r.rep.Answered[k] += v
		}
	}
	r.rep.Answered[itemTransient] += r.search.fake.Stats().ItemFails + r.hooks.fake.Stats().ItemFails
}

// compare lists every key whose last word at its third party is not the
// database's: a live row must have arrived with its current payload (and,
// for resources, its version); a row gone must have arrived as a tombstone
// above every version sent, or never have been sent at all.
func (r *run) compare(ctx context.Context) []string {
	var out []string
	out = append(out, r.compareTable(ctx, r.live,
		`SELECT id::text, version, payload, true FROM resources`, "resources")...)
	// A composite key's id is the compact JSON array of its values; a row
	// its source's filter leaves out is, to the third party, a row gone.
	out = append(out, r.compareTable(ctx, r.crm,
		`SELECT id::text, 0, to_jsonb(o), true FROM orders o
		 UNION ALL SELECT id, 0, to_jsonb(a), true FROM accounts a
		 UNION ALL SELECT '[' || to_jsonb(tenant)::text || ',' || id::text || ']', 0, to_jsonb(l), deleted_at IS NULL FROM line_items l`,
		"orders, accounts and line_items")...)
	out = append(out, r.compareTable(ctx, r.search, `SELECT id, 0, to_jsonb(a), true FROM accounts a`, "accounts at search")...)
	out = append(out, r.compareTable(ctx, r.hub, `SELECT id::text, 0, to_jsonb(o), true FROM orders o`, "orders at hub")...)
	out = append(out, r.compareTable(ctx, r.hooks, `SELECT id, 0, to_jsonb(a), true FROM accounts a`, "accounts at hooks")...)
	out = append(out, r.compareTenants(ctx)...)
	return out
}

func (r *run) compareTable(ctx context.Context, a *api, query, what string) []string {
	rows, err := r.pool.Query(ctx, query)
	if err != nil {
		return []string{fmt.Sprintf("%s: read: %v", what, err)}
	}
	type row struct {
		version int64
		payload json.RawMessage
	}
	db := map[string]row{}
	for rows.Next() {
		var id string
		var rw row
		var live bool
		if err := rows.Scan(&id, &rw.version, &rw.payload, &live); err != nil {
			rows.Close()
			return []string{fmt.Sprintf("%s: read: %v", what, err)}
		}
		if live {
			db[id] = rw
		}
	}
	rows.Close()
	words := a.lastWords()
	var out []string
	add := func(s string) {
		if len(out) < 5 {
			out = append(out, s)
		}
	}
	for id, rw := range db {
		l, ok := words[id]
		switch {
		case !ok:
			add(fmt.Sprintf("%s id %s: never arrived", what, id))
		case l.deleted:
			add(fmt.Sprintf("%s id %s: a tombstone (version %d) is the last word on a live row", what, id, l.version))
		case rw.version > 0 && l.version != rw.version:
			add(fmt.Sprintf("%s id %s: version %d arrived last, the row is at %d", what, id, l.version, rw.version))
		case !sameJSON(l.payload, rw.payload):
			add(fmt.Sprintf("%s id %s: the payload that arrived last is not the row's", what, id))
		}
	}
	for id, l := range words {
		if _, live := db[id]; !live && !l.deleted {
			add(fmt.Sprintf("%s id %s: deleted, and no tombstone arrived (last version %d live)", what, id, l.version))
		}
	}
	return out
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
