package history

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncer-dev/syncer/internal/feed"
)

// rows are the entries of one or more batches as the columns of one
// statement: each entry names its head, the request that carried it (its
// batch's fields with the request's key, time, status and latency) or its
// batch alone for an entry settled without a request. A writer adds many
// batches to one rows and writes them in one statement.
type rows struct {
	keys     []string
	versions []int64
	deleted  []bool
	head     []int32 // 1-based index into the heads' arrays
	outcome  []string
	reason   []string
	// narrow holds while every entry is accepted with no reason: the
	// common drain's rows, written without those two arrays (narrowSQL).
	narrow bool

	hFeed    []string
	hDest    []string
	hTenant  []string
	hBatched []pgtype.Timestamptz
	hKey     []string // "" for a batch's head without a request
	hAt      []pgtype.Timestamptz
	hStatus  []pgtype.Int2
	hLatency []pgtype.Int4
}

func newRows() *rows { return &rows{narrow: true} }

// len is the number of entries.
func (r *rows) len() int { return len(r.keys) }

// reset empties r, keeping its arrays for the next batches.
func (r *rows) reset() {
	r.keys, r.versions, r.deleted, r.head, r.outcome, r.reason = r.keys[:0], r.versions[:0], r.deleted[:0], r.head[:0], r.outcome[:0], r.reason[:0]
	r.hFeed, r.hDest, r.hTenant, r.hBatched, r.hKey = r.hFeed[:0], r.hDest[:0], r.hTenant[:0], r.hBatched[:0], r.hKey[:0]
	r.hAt, r.hStatus, r.hLatency = r.hAt[:0], r.hStatus[:0], r.hLatency[:0]
	r.narrow = true
}

// addHead adds a head of b, for a request of its (request) or for its
// entries settled without one, and returns its index.
func (r *rows) addHead(b *Batch, key string, at time.Time, status, latencyMS int, request bool) int32 {
	r.hFeed = append(r.hFeed, b.Feed)
	r.hDest = append(r.hDest, b.Destination)
	r.hTenant = append(r.hTenant, b.Tenant)
	r.hBatched = append(r.hBatched, pgtype.Timestamptz{Time: b.BatchedAt, Valid: !b.BatchedAt.IsZero()})
	r.hKey = append(r.hKey, key)
	r.hAt = append(r.hAt, pgtype.Timestamptz{Time: at, Valid: request && !at.IsZero()})
	r.hStatus = append(r.hStatus, pgtype.Int2{Int16: int16(status), Valid: request})
	r.hLatency = append(r.hLatency, pgtype.Int4{Int32: int32(latencyMS), Valid: request})
	return int32(len(r.hKey))
}

func (r *rows) add(it feed.Item, head int32, outcome, reason string) {
	reason = cut(reason)
	r.keys = append(r.keys, it.ID)
	r.versions = append(r.versions, it.Version)
	r.deleted = append(r.deleted, it.Deleted)
	r.head = append(r.head, head)
	r.outcome = append(r.outcome, outcome)
	r.reason = append(r.reason, reason)
	if outcome != Accepted || reason != "" {
		r.narrow = false
	}
}

type settlement struct{ outcome, reason string }

// addBatch adds b's entries: one per item per attempt that carried it,
// the last of them with the item's settlement, and one per item settled
// without a request.
func (r *rows) addBatch(b *Batch) {
	heads := make([]int32, len(b.Attempts))
	for i, a := range b.Attempts {
		heads[i] = r.addHead(b, a.Key, a.At, a.Status, int(a.Latency/time.Millisecond), true)
	}
	if b.allAccepted() {
		// The common batch: one request, which carried every item, all
		// accepted.
		for _, it := range b.Accepted {
			r.add(it, heads[0], Accepted, "")
		}
		return
	}
	var none int32 // the head of entries without a request, made once needed
	noRequest := func() int32 {
		if none == 0 {
			none = r.addHead(b, "", time.Time{}, 0, 0, false)
		}
		return none
	}
	n := len(b.Accepted) + len(b.Rejected) + len(b.Deferred)
	settled := make(map[string]settlement, n)
	for _, it := range b.Accepted {
		settled[it.ID] = settlement{outcome: Accepted}
	}
	for _, rj := range b.Rejected {
		settled[rj.Item.ID] = settlement{outcome: Failed, reason: rj.Error}
	}
	for _, d := range b.Deferred {
		settled[d.Item.ID] = settlement{outcome: Deferred, reason: d.Reason}
	}
	// The last attempt that carried an item settles it.
	var last map[string]int
	if len(b.Attempts) > 1 {
		last = make(map[string]int, n)
		for i, a := range b.Attempts {
			for _, it := range a.Items {
				last[it.ID] = i
			}
		}
	}
	seen := make(map[string]bool, n)
	for i, a := range b.Attempts {
		for _, it := range a.Items {
			s, ok := settled[it.ID]
			if ok && (last == nil || last[it.ID] == i) {
				r.add(it, heads[i], s.outcome, s.reason)
				seen[it.ID] = true
				continue
			}
			r.add(it, heads[i], unsettled(a, len(a.Items)), a.Reason)
		}
	}
	// Settled without an attempt of this batch's (none carried them here:
	// a batch resent with no attempt kept, say).
	for _, it := range b.Accepted {
		if !seen[it.ID] {
			r.add(it, noRequest(), Accepted, "")
		}
	}
	for _, rj := range b.Rejected {
		if !seen[rj.Item.ID] {
			r.add(rj.Item, noRequest(), Failed, rj.Error)
		}
	}
	for _, d := range b.Deferred {
		if !seen[d.Item.ID] {
			r.add(d.Item, noRequest(), Deferred, d.Reason)
		}
	}
	for _, it := range b.Skipped {
		r.add(it, noRequest(), Skipped, "")
	}
	for _, f := range b.Failed {
		r.add(f.Item, noRequest(), Failed, f.Reason)
	}
}

// allAccepted reports whether b is the common batch: one request, which
// carried every item, all accepted.
func (b *Batch) allAccepted() bool {
	return len(b.Attempts) == 1 && len(b.Rejected)+len(b.Deferred)+len(b.Skipped)+len(b.Failed) == 0 &&
		len(b.Accepted) == len(b.Attempts[0].Items) && len(b.Accepted) > 0
}

// insertSQL writes rows: the entries joined to their heads. An entry
// without a request is timed by the statement (now()).
const insertSQL = `INSERT INTO syncer_history
	(feed, key, version, deleted, at, batched_at, batch_key, destination, tenant, status, latency_ms, outcome, reason)
	SELECT h.f, i.k, i.v, NULLIF(i.d, false), coalesce(h.t, now()), h.ba, NULLIF(h.bk, ''), h.dst, NULLIF(h.tn, ''), h.s, h.l, i.o, NULLIF(i.r, '')
	FROM unnest($1::text[], $2::bigint[], $3::boolean[], $4::int[], $5::text[], $6::text[]) AS i (k, v, d, n, o, r)
	JOIN unnest($7::text[], $8::text[], $9::text[], $10::timestamptz[], $11::text[], $12::timestamptz[], $13::smallint[], $14::int[])
		WITH ORDINALITY AS h (f, dst, tn, ba, bk, t, s, l, n)
		ON h.n = i.n`

// narrowSQL is insertSQL for rows whose entries are all accepted with no
// reason: two arrays fewer to send and unnest, for most of a drain.
const narrowSQL = `INSERT INTO syncer_history
	(feed, key, version, deleted, at, batched_at, batch_key, destination, tenant, status, latency_ms, outcome)
	SELECT h.f, i.k, i.v, NULLIF(i.d, false), coalesce(h.t, now()), h.ba, NULLIF(h.bk, ''), h.dst, NULLIF(h.tn, ''), h.s, h.l, 'accepted'
	FROM unnest($1::text[], $2::bigint[], $3::boolean[], $4::int[]) AS i (k, v, d, n)
	JOIN unnest($5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10::timestamptz[], $11::smallint[], $12::int[])
		WITH ORDINALITY AS h (f, dst, tn, ba, bk, t, s, l, n)
		ON h.n = i.n`

// statement is the statement that writes r, with its arguments; false
// when r holds no entry.
func (r *rows) statement() (string, []any, bool) {
	if r.len() == 0 {
		return "", nil, false
	}
	heads := []any{r.hFeed, r.hDest, r.hTenant, r.hBatched, r.hKey, r.hAt, r.hStatus, r.hLatency}
	if r.narrow {
		return narrowSQL, append([]any{r.keys, r.versions, r.deleted, r.head}, heads...), true
	}
	return insertSQL, append([]any{r.keys, r.versions, r.deleted, r.head, r.outcome, r.reason}, heads...), true
}
