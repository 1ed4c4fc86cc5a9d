// Package history keeps the row's story (issue 45): for every exported
// version of a key, each request that carried it (when, to which
// destination, under which Idempotency-Key, the answer's status, its
// latency, the third party's reason) and how the version was settled
// (accepted, failed, deferred, skipped as unchanged), with the time the
// version was captured, for a retention.
//
// Where: the common batch (one request that carried every item, all
// accepted: most of the story) is one row of syncer_history_requests, its
// items as arrays, found by a GIN index of its keys (once the Pruner has
// indexed them: tidy.go); every other entry is
// a row of syncer_history, an entry an item, found by a btree of (feed,
// key). An entry a key costs PostgreSQL a seventh of what the drain spends
// on the item; a row a request, a hundredth (migration 029). Lookup reads
// both.
//
// Guarantees:
//   - A batch's entries are written in the transaction that marks the
//     batch and forgets its record (Queue, called by the exporter's
//     marker), in one statement: the story of a marked batch is never
//     lost while the marks stand, and never written for marks that rolled
//     back. Attempts that end a push with a wait (a 429's pause,
//     transient failures past the retry bound) are written when they
//     happen (Write): the batch goes again later, and its retries add
//     entries of their own. Entries are only ever added, never updated:
//     a failure retried stays in the story with the retry after it.
//   - A version superseded by a newer one before it was settled is not
//     written as such: Lookup reads it from the newer version's entries.
//   - Reasons are cut to ReasonMax bytes and were SafeText'd by whoever
//     read them from the answer: no token reaches the table.
//   - Pruning (Pruner) deletes small chunks of the oldest entries, by age
//     (Config.Retention) and by count (Config.MaxEntries), each chunk its
//     own short statement: it never holds a lock the export waits for.
//     It also indexes the keys of the requests written since it last did
//     when the export is quiet (or every Config.TidyRequests requests),
//     which the marking transactions would otherwise pay for.
//
// The package owns syncer_history and syncer_history_requests
// (migrations 023, 029).
package history

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
)

// Outcomes of an entry. The first four settle a version (Deferred only
// for now: the key goes again alone); the others are attempts that did
// not settle it.
const (
	Accepted = "accepted"
	Failed   = "failed"
	Deferred = "deferred"
	Skipped  = "skipped"
	// RateLimited is a request answered 429: the batch goes again after
	// the pause, under the same key.
	RateLimited = "rate-limited"
	// Retried is a request answered transiently (5xx, 408, 409, a
	// timeout, no answer): it goes again under the same key.
	Retried = "retried"
	// Split is a request refused as a whole (400, 413, 422): its items
	// go again in halves, under keys of their own.
	Split = "split"
	// Superseded is never written: Lookup says it of a version that a
	// newer version followed before it was settled.
	Superseded = "superseded"
	// Pending is never written: Lookup says it of the newest version
	// while none of its entries settled it.
	Pending = "pending"
)

// ReasonMax is the most bytes of a reason kept.
const ReasonMax = 500

// Failure is an item settled failed without a request (too large to send).
type Failure struct {
	Item   feed.Item
	Reason string
}

// Batch is what one batch adds to its items' stories.
type Batch struct {
	// Feed is "resources" or the configured source's name.
	Feed        string
	Destination string
	// Tenant is the batch's tenant, for a source with a tenant column;
	// empty otherwise.
	Tenant string
	// BatchedAt is when the batch was made.
	BatchedAt time.Time
	// Attempts are the batch's requests (delivery.Outcome.Attempts).
	Attempts []delivery.Attempt
	// The settlements: the outcome's, and those made without a request.
	Accepted []feed.Item
	Rejected []delivery.Rejection
	Deferred []delivery.Deferral
	Skipped  []feed.Item
	Failed   []Failure
}

// rows is a Batch as the columns of its entries.
type rows struct {
	keys     []string
	versions []int64
	deleted  []bool
	attempt  []int32 // 1-based index into the attempts' arrays; 0: none
	outcome  []string
	reason   []string
	captured []pgtype.Timestamptz

	aKeys    []string
	aAt      []time.Time
	aStatus  []int16
	aLatency []int32
}

func (r *rows) add(it feed.Item, attempt int32, outcome, reason string) {
	r.keys = append(r.keys, it.ID)
	r.versions = append(r.versions, it.Version)
	r.deleted = append(r.deleted, it.Deleted)
	r.attempt = append(r.attempt, attempt)
	r.outcome = append(r.outcome, outcome)
	r.reason = append(r.reason, cut(reason))
	r.captured = append(r.captured, capturedOf(it))
}

type settlement struct{ outcome, reason string }

// build lays b out as rows: one per item per attempt that carried it, the
// last of them with the item's settlement, and one per item settled
// without a request.
func (b *Batch) build() *rows {
	n := len(b.Accepted) + len(b.Rejected) + len(b.Deferred) + len(b.Skipped) + len(b.Failed)
	r := &rows{}
	r.keys = make([]string, 0, n)
	r.versions = make([]int64, 0, n)
	r.deleted = make([]bool, 0, n)
	r.attempt = make([]int32, 0, n)
	r.outcome = make([]string, 0, n)
	r.reason = make([]string, 0, n)
	r.captured = make([]pgtype.Timestamptz, 0, n)
	for _, a := range b.Attempts {
		r.aKeys = append(r.aKeys, a.Key)
		r.aAt = append(r.aAt, a.At)
		r.aStatus = append(r.aStatus, int16(a.Status))
		r.aLatency = append(r.aLatency, int32(a.Latency/time.Millisecond))
	}
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
	// The last attempt that carried an item settles it; the common batch
	// has one attempt, which carried every item.
	var last map[string]int
	if len(b.Attempts) > 1 {
		last = make(map[string]int, n)
		for i, a := range b.Attempts {
			for _, it := range a.Items {
				last[it.ID] = i
			}
		}
	}
	attempted := 0
	for i, a := range b.Attempts {
		for _, it := range a.Items {
			s, ok := settled[it.ID]
			if ok && (last == nil || last[it.ID] == i) {
				r.add(it, int32(i+1), s.outcome, s.reason)
				attempted++
				continue
			}
			r.add(it, int32(i+1), unsettled(a, len(a.Items)), a.Reason)
		}
	}
	if attempted < len(settled) {
		// Settled without an attempt of this batch's (none carried them
		// here: a batch resent with no attempt kept, say).
		seen := make(map[string]bool, len(r.keys))
		for i, k := range r.keys {
			if r.outcome[i] == Accepted || r.outcome[i] == Failed || r.outcome[i] == Deferred {
				seen[k] = true
			}
		}
		for _, it := range b.Accepted {
			if !seen[it.ID] {
				r.add(it, 0, Accepted, "")
			}
		}
		for _, rj := range b.Rejected {
			if !seen[rj.Item.ID] {
				r.add(rj.Item, 0, Failed, rj.Error)
			}
		}
		for _, d := range b.Deferred {
			if !seen[d.Item.ID] {
				r.add(d.Item, 0, Deferred, d.Reason)
			}
		}
	}
	for _, it := range b.Skipped {
		r.add(it, 0, Skipped, "")
	}
	for _, f := range b.Failed {
		r.add(f.Item, 0, Failed, f.Reason)
	}
	return r
}

// unsettled names an attempt that did not settle its item by its answer.
func unsettled(a delivery.Attempt, items int) string {
	switch {
	case a.Status == 429:
		return RateLimited
	case (a.Status == 400 || a.Status == 413 || a.Status == 422) && items > 1:
		return Split
	default:
		return Retried
	}
}

// cut bounds a reason to ReasonMax bytes, on a rune boundary.
func cut(s string) string {
	if len(s) <= ReasonMax {
		return s
	}
	s = s[:ReasonMax]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

const insertSQL = `INSERT INTO syncer_history
	(feed, key, version, deleted, at, batched_at, batch_key, destination, tenant, status, latency_ms, outcome, reason, captured_at)
	SELECT $1, i.k, i.v, NULLIF(i.d, false), coalesce(a.t, now()), $2, a.bk, $3, NULLIF($4, ''), a.s, a.l, i.o, NULLIF(i.r, ''), i.c
	FROM unnest($5::text[], $6::bigint[], $7::boolean[], $8::int[], $9::text[], $10::text[], $11::timestamptz[]) AS i (k, v, d, n, o, r, c)
	LEFT JOIN unnest($12::text[], $13::timestamptz[], $14::smallint[], $15::int[]) WITH ORDINALITY AS a (bk, t, s, l, n)
		ON a.n = i.n`

// acceptedSQL is insertSQL for the common batch: one request, which
// carried every item, all accepted.
// requestSQL writes the common batch (allAccepted) as one row of
// syncer_history_requests: one request, which carried every item, all
// accepted (migration 029 says why).
const requestSQL = `INSERT INTO syncer_history_requests
	(feed, at, batched_at, batch_key, destination, tenant, status, latency_ms, keys, versions, deleted, captured, items, indexed)
	VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), $7, $8, $9, $10, $11, $12, $13, $14)`

// indexAtOnceItems is the most keys a request is written indexed with
// (its keys placed in the GIN index by its insert) rather than left to
// the Pruner's tidy (tidy.go). The tidy defers the keys' placing out of
// a drain's batches of hundreds; a hot look's request of a few keys
// places them for little, where the tidy's later UPDATE wrote the row
// again (a heap tuple, its WAL and its vacuum, an entry of the
// unindexed rows' btree) for every request: 7.7 ms a tidy of about a
// hundred requests on a loaded machine, 15 µs an exported row at 500
// single-row inserts a second (issue 57; docs/benchmarks.md, "Plans made
// once, and small requests indexed at once").
const indexAtOnceItems = 16

// indexedAtOnce reports whether a request of n keys is written indexed.
func indexedAtOnce(n int) bool { return n <= indexAtOnceItems }

// allAccepted reports whether b is the common batch requestSQL writes.
func (b *Batch) allAccepted() bool {
	return len(b.Attempts) == 1 && len(b.Rejected)+len(b.Deferred)+len(b.Skipped)+len(b.Failed) == 0 &&
		len(b.Accepted) == len(b.Attempts[0].Items) && len(b.Accepted) > 0
}

// capturedOf is an item's capture time as an array's element: NULL when
// zero.
func capturedOf(it feed.Item) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: it.Captured(), Valid: it.CapturedAt != 0}
}

// Arrays are the key and version arrays of the common batch's statement,
// kept by a caller that queues batch after batch (the exporter's marker:
// two arrays a batch were about 24 bytes of a drained row, issue 55). Reset
// them at each transaction's start, once the last one's arguments were
// encoded (locks.Pipe's Send and pgx's SendBatch encode before they
// return). The nil *Arrays makes new arrays each time.
type Arrays struct {
	keys     [][]string
	versions [][]int64
	used     int
	cap      capturedArrays
}

// Reset makes every array free again.
func (a *Arrays) Reset() {
	if a != nil {
		a.used = 0
		a.cap.used = 0
	}
}

// take returns a key and a version array of length n.
func (a *Arrays) take(n int) ([]string, []int64) {
	if a == nil {
		return make([]string, n), make([]int64, n)
	}
	if a.used == len(a.keys) {
		a.keys, a.versions = append(a.keys, nil), append(a.versions, nil)
	}
	i := a.used
	a.used++
	if cap(a.keys[i]) < n {
		a.keys[i], a.versions[i] = make([]string, n), make([]int64, n)
	} else {
		clear(a.keys[i][:cap(a.keys[i])]) // the last batch's keys are not kept alive
	}
	return a.keys[i][:n], a.versions[i][:n]
}

func (b *Batch) args(arrays *Arrays) (string, []any, bool) {
	var batched any
	if !b.BatchedAt.IsZero() {
		batched = b.BatchedAt
	}
	if b.allAccepted() {
		a := b.Attempts[0]
		n := len(b.Accepted)
		keys, versions := arrays.take(n)
		for i, it := range b.Accepted {
			keys[i], versions[i] = it.ID, it.Version
		}
		deleted, captured := b.acceptedColumns(arrays)
		return requestSQL, []any{b.Feed, a.At, batched, a.Key, b.Destination, b.Tenant, int16(a.Status), int32(a.Latency / time.Millisecond),
			keys, versions, deleted, captured, int32(n), indexedAtOnce(n)}, true
	}
	r := b.build()
	if len(r.keys) == 0 {
		return "", nil, false
	}
	return insertSQL, []any{b.Feed, batched, b.Destination, b.Tenant,
		r.keys, r.versions, r.deleted, r.attempt, r.outcome, r.reason, r.captured,
		r.aKeys, r.aAt, r.aStatus, r.aLatency}, true
}

// acceptedColumns are the common batch's deleted and captured arrays:
// NULL for none deleted and none captured, the common drain of new rows,
// whose rows then carry two arrays, not four. The captured times are
// pointers to capturedAt, nil for an item without one, taken from arrays
// (nil: new ones): pgx encodes them without an allocation apiece
// (captured.go).
func (b *Batch) acceptedColumns(arrays *Arrays) ([]bool, any) {
	n := len(b.Accepted)
	var deleted []bool
	var some bool
	for i, it := range b.Accepted {
		if it.Deleted && deleted == nil {
			deleted = make([]bool, n) // the items before it were not
		}
		if deleted != nil {
			deleted[i] = it.Deleted
		}
		some = some || it.CapturedAt != 0
	}
	if !some {
		return deleted, nil // a NULL array, not a typed nil in an any
	}
	at, captured := arrays.captured().take(n)
	for i, it := range b.Accepted {
		if it.CapturedAt == 0 {
			captured[i] = nil
			continue
		}
		at[i] = capturedAt(it.CapturedAt)
		captured[i] = &at[i]
	}
	return deleted, captured
}

// ComposeRequest adds to s the common batch's row (the one request that
// carried every item, all accepted), its keys and versions given as
// expressions of s (text[] and bigint[], in b.Accepted's order) that
// other pieces of s share with it (issue 55: the marks', sent once). It
// reports false, adding nothing, when b is not the common batch: Queue
// it apart. The guarantees are Queue's: compose it into a statement of
// the transaction that marks the batch.
func (b *Batch) ComposeRequest(s *compose.Statement, keys, versions string) bool {
	return b.ComposeRequestIn(s, keys, versions, nil)
}

// ComposeRequestIn is ComposeRequest with the captured times' array taken
// from arrays.
func (b *Batch) ComposeRequestIn(s *compose.Statement, keys, versions string, arrays *Arrays) bool {
	if !b.allAccepted() {
		return false
	}
	var batched any
	if !b.BatchedAt.IsZero() {
		batched = b.BatchedAt
	}
	a := b.Attempts[0]
	deleted, captured := b.acceptedColumns(arrays)
	s.Modify(`INSERT INTO syncer_history_requests
	(feed, at, batched_at, batch_key, destination, tenant, status, latency_ms, keys, versions, deleted, captured, items, indexed)
	VALUES (` + s.Arg(b.Feed) + `, ` + s.Arg(a.At) + `, ` + s.Arg(batched) + `::timestamptz, ` + s.Arg(a.Key) + `, ` +
		s.Arg(b.Destination) + `, NULLIF(` + s.Arg(b.Tenant) + `::text, ''), ` + s.Arg(int16(a.Status)) + `::smallint, ` +
		s.Arg(int32(a.Latency/time.Millisecond)) + `::int, ` + keys + `, ` + versions + `, ` + s.Arg(deleted) + `::boolean[], ` +
		s.Arg(captured) + `::timestamptz[], ` + s.Arg(int32(len(b.Accepted))) + `::int, ` + s.Arg(indexedAtOnce(len(b.Accepted))) + `::boolean)`)
	return true
}

// Queue adds to qb the statement that writes b's entries: one statement
// for the whole batch. Queue it in the transaction that marks the batch.
func Queue(qb *pgx.Batch, b *Batch) {
	QueueIn(qb, b, nil)
}

// QueueIn is Queue with the common batch's arrays taken from arrays.
func QueueIn(qb *pgx.Batch, b *Batch, arrays *Arrays) {
	sql, args, ok := b.args(arrays)
	if !ok {
		return
	}
	qb.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("history: write %s: %w", b.Feed, err)
		}
		return nil
	}
}

// Write writes b's entries on their own: the attempts of a push that
// ended in a wait.
func Write(ctx context.Context, q database.Querier, b *Batch) error {
	sql, args, ok := b.args(nil)
	if !ok {
		return nil
	}
	if _, err := q.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("history: write %s: %w", b.Feed, err)
	}
	return nil
}
