// Package history keeps the row's story (issue 45): for every exported
// version of a key, each request that carried it (when, to which
// destination, under which Idempotency-Key, the answer's status, its
// latency, the third party's reason) and how the version was settled
// (accepted, failed, deferred, skipped as unchanged), for a retention.
//
// Guarantees:
//   - A batch's entries are handed to the daemon's Writer once the
//     transaction that marks the batch and forgets its record has
//     committed, never for marks that rolled back. The Writer writes
//     many batches' entries in one statement, on a connection of its own,
//     within its FlushInterval (200 ms): off the marker transaction, which
//     is the export's serial stage. So the story of a marked batch is
//     written a moment after its marks, not with them: a crash of the
//     daemon between the two (or a shutdown whose last write outlasts its
//     bound) loses those entries, and a write that fails loses its own
//     (logged, counted in syncer_history_write_errors_total); the export
//     never fails on the story and waits for it only while the Writer's
//     bounded queue is full (Add waits for room; a caller whose wait ends
//     first loses that batch's entries, logged and counted). Attempts that end a push with a
//     wait (a 429's pause, transient failures past the retry bound) are
//     handed when they happen: the batch goes again later, and its
//     retries add entries of their own. Entries are only ever added,
//     never updated: a failure retried stays in the story with the retry
//     after it. The table is unlogged: a crash of PostgreSQL empties it.
//   - A version superseded by a newer one before it was settled is not
//     written as such: Lookup reads it from the newer version's entries.
//   - Reasons are cut to ReasonMax bytes and were SafeText'd by whoever
//     read them from the answer: no token reaches the table.
//   - Pruning (Pruner) deletes small chunks of the oldest entries, by age
//     (Config.Retention) and by count (Config.MaxEntries), each chunk its
//     own short statement: it never holds a lock the export waits for.
//
// The package owns syncer_history (migration 023).
package history

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

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

// Queue adds to qb the statement that writes b's entries, in the
// transaction qb runs in. The exporter hands its batches to a Writer
// instead; Queue is for whoever needs the entries written with other
// statements.
func Queue(qb *pgx.Batch, b *Batch) {
	r := newRows()
	r.addBatch(b)
	sql, args, ok := r.statement()
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

// Write writes b's entries on their own, now.
func Write(ctx context.Context, q database.Querier, b *Batch) error {
	r := newRows()
	r.addBatch(b)
	return write(ctx, q, r)
}

// write writes r's entries in one statement.
func write(ctx context.Context, q database.Querier, r *rows) error {
	sql, args, ok := r.statement()
	if !ok {
		return nil
	}
	if _, err := q.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("history: write %d entries: %w", r.len(), err)
	}
	return nil
}
