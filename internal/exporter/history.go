package exporter

import (
	"context"
	"errors"
	"log/slog"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
)

// The row's story (issue 45): every batch marked hands its items' entries
// to the exporter's history.Writer once the marker transaction that marks
// it has committed (addHistory), never for marks that rolled back; the
// writer writes many batches' entries in one statement, off the marker
// transaction, which is the pipeline's serial stage. The requests of a
// push that ended in a wait are handed when it ends (writeWaited), since
// the batch is marked only once it is answered, perhaps by another run.

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

// addHistory hands the writer the entries of b, answered and marked: call
// it once the marks committed.
func (p *pipeline) addHistory(ctx context.Context, b *batch) {
	w := p.e.history
	if w == nil || b.out == nil {
		return
	}
	h := p.historyOf(b, b.out.Attempts)
	h.Accepted, h.Rejected, h.Deferred, h.Skipped = b.out.Accepted, b.out.Rejected, b.out.Deferred, b.unchanged
	for _, o := range b.oversize {
		h.Failed = append(h.Failed, history.Failure{Item: feed.Item{ID: o.ID, Version: o.Version}, Reason: oversizeError(o, p.feed.Limits())})
	}
	p.handHistory(ctx, b, h)
}

// writeWaited hands the writer the requests of b's push that ended in err,
// a wait: its items go again later, and their story shows why they
// waited.
func (p *pipeline) writeWaited(ctx context.Context, b *batch, err error) {
	var we *delivery.WaitError
	if p.e.history == nil || !errors.As(err, &we) || len(we.Attempts) == 0 {
		return
	}
	p.handHistory(ctx, b, p.historyOf(b, we.Attempts))
}

// handHistory adds h to the writer. The wait for room is bounded like a
// mark's, and runs even when the job is being cancelled: its batch was
// answered.
func (p *pipeline) handHistory(ctx context.Context, b *batch, h *history.Batch) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkTimeoutDefault)
	defer cancel()
	if err := p.e.history.Add(hctx, h); err != nil {
		p.e.logger.WarnContext(ctx, "exporter: the story of a batch was not written; the export goes on",
			slog.String("idempotency_key", b.key), slog.String("error", err.Error()))
	}
}
