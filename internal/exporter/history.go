package exporter

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
)

// The row's story (issue 45): every batch marked adds its items' entries
// to internal/history in the marker transaction that marks it and forgets
// its record (story.queue), one statement a batch; the requests of a push
// that ended in a wait are written when it ends (story.writeWaited), since
// the batch is marked only once it is answered, perhaps by another run.

// story is the stage that writes a target's batches into their rows'
// stories. A nil *story writes none (Config.NoHistory).
type story struct {
	// q writes a waiting batch's requests, outside any marker
	// transaction.
	q      database.Querier
	logger *slog.Logger
	// dest names the destination in every entry.
	dest string
	// lim says why an oversize item was never sent.
	lim feed.Limits
}

// of is what batch b adds to its items' stories.
func (s *story) of(b *batch, attempts []delivery.Attempt) *history.Batch {
	return &history.Batch{Feed: sourceOf(b.name), Destination: s.dest, Tenant: b.tenant().String(), BatchedAt: b.at, Attempts: attempts}
}

// queue adds to qb the entries of b, answered and being marked, in
// arrays (nil: new ones) the marker reuses from one transaction to the
// next.
func (s *story) queue(qb *pgx.Batch, b *batch, arrays *history.Arrays) {
	if s == nil || b.out == nil {
		return
	}
	h := s.of(b, b.out.Attempts)
	h.Accepted, h.Rejected, h.Deferred, h.Skipped = b.out.Accepted, b.out.Rejected, b.out.Deferred, b.unchanged
	for _, o := range b.oversize {
		h.Failed = append(h.Failed, history.Failure{Item: feed.Item{ID: o.ID, Version: o.Version}, Reason: oversizeError(o, s.lim)})
	}
	history.QueueIn(qb, h, arrays)
}

// compose adds to st the entries of b, answered all accepted, whose
// marks st makes under keys and versions (composed.go); it queues them
// on qb apart when they do not compose.
func (s *story) compose(qb *pgx.Batch, st *compose.Statement, b *batch, keys, versions string, arrays *history.Arrays) {
	if s == nil {
		return
	}
	h := s.of(b, b.out.Attempts)
	h.Accepted = b.out.Accepted
	if !h.ComposeRequestIn(st, keys, versions, arrays) {
		s.queue(qb, b, arrays)
	}
}

// writeWaited writes the requests of b's push that ended in err, a wait:
// its items go again later, and their story shows why they waited.
func (s *story) writeWaited(ctx context.Context, b *batch, err error) {
	var we *delivery.WaitError
	if s == nil || !errors.As(err, &we) || len(we.Attempts) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkTimeoutDefault)
	defer cancel()
	if werr := history.Write(wctx, s.q, s.of(b, we.Attempts)); werr != nil {
		s.logger.WarnContext(ctx, "exporter: write the story of a batch that waits",
			slog.String("idempotency_key", b.key), slog.String("error", werr.Error()))
	}
}
