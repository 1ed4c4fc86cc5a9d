package exporter

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
)

// The row's story (issue 45): every batch marked adds its items' entries
// to internal/history in the marker transaction that marks it and forgets
// its record (queueHistory), one statement a batch; the requests of a push
// that ended in a wait are written when it ends (writeWaited), since the
// batch is marked only once it is answered, perhaps by another run.

// historyOf is what batch b adds to its items' stories.
func (p *pipeline) historyOf(b *batch, attempts []delivery.Attempt) *history.Batch {
	h := &history.Batch{Feed: sourceOf(b.name), Destination: p.destName, BatchedAt: b.at, Attempts: attempts}
	// A lane's batch is one tenant's, named by its salt (a batch resent
	// after a crash has no item decoded with its tenant).
	if t, ok := tenantOfSalt(b.salt); ok {
		h.Tenant = t
	}
	return h
}

// queueHistory adds to qb the entries of b, answered and being marked,
// in arrays (nil: new ones) the marker reuses from one transaction to the
// next.
func (p *pipeline) queueHistory(qb *pgx.Batch, b *batch, arrays *history.Arrays) {
	if p.e.cfg.NoHistory || b.out == nil {
		return
	}
	h := p.historyOf(b, b.out.Attempts)
	h.Accepted, h.Rejected, h.Deferred, h.Skipped = b.out.Accepted, b.out.Rejected, b.out.Deferred, b.unchanged
	for _, o := range b.oversize {
		h.Failed = append(h.Failed, history.Failure{Item: feed.Item{ID: o.ID, Version: o.Version}, Reason: oversizeError(o, p.feed.Limits())})
	}
	history.QueueIn(qb, h, arrays)
}

// writeWaited writes the requests of b's push that ended in err, a wait:
// its items go again later, and their story shows why they waited.
func (p *pipeline) writeWaited(ctx context.Context, b *batch, err error) {
	var we *delivery.WaitError
	if p.e.cfg.NoHistory || !errors.As(err, &we) || len(we.Attempts) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkTimeoutDefault)
	defer cancel()
	if werr := history.Write(wctx, p.e.pool, p.historyOf(b, we.Attempts)); werr != nil {
		p.e.logger.WarnContext(ctx, "exporter: write the story of a batch that waits",
			slog.String("idempotency_key", b.key), slog.String("error", werr.Error()))
	}
}
