package exporter

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/replays"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// resume sends, one at a time and in the order they were recorded, every
// batch a previous holder of the lock recorded and did not mark, before
// anything else is read: they may have reached the third party, so they go
// again byte for byte under their keys, and a later version of any of their
// rows goes only after them. Batches of cancelled replays are dropped.
// The holder of the resources' lock resends the batches of resources (live
// and replays); a source's holder those of its own checkpoint only: owns
// says which checkpoints are the caller's. A lane's batches are not sent
// here: their tenants are set aside, and the lane's passes send them per
// tenant (aside.go), so one tenant that cannot send holds no other.
func (e *Exporter) resume(ctx context.Context, lk *locks.Lock, t target, owns func(checkpoint string) bool) error {
	recs, err := checkpoint.Recorded(ctx, e.pool)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	var batches []*batch
	var drop []int64
	lane, _ := t.feed.(*laneFeed)
	for _, r := range recs {
		if !owns(r.Name) {
			continue
		}
		if tenant, ok := tenantOfSalt(r.Salt); ok && lane != nil && r.Name == lane.name {
			// A lane's batch: per tenant, not one after another for the
			// whole lane. Its tenant is set aside, due at once; the
			// first pass sends it if the tenant is ready (aside.go), and
			// a tenant that is not keeps it recorded alone.
			lane.setAside(tenant, time.Time{})
			continue
		}
		if keep, err := e.keepRecorded(ctx, r.Name); err != nil {
			return err
		} else if !keep {
			drop = append(drop, r.Seq)
			continue
		}
		b, err := recordedBatch(r)
		if err != nil {
			return err
		}
		batches = append(batches, b)
	}
	if len(drop) > 0 {
		if err := lk.WithTx(ctx, func(tx pgx.Tx) error { return checkpoint.Forget(ctx, tx, drop) }); err != nil {
			return err
		}
	}
	if len(batches) == 0 {
		return nil
	}
	e.logger.InfoContext(ctx, "exporter: resending the batches in flight at the last stop, under their keys",
		slog.Int("batches", len(batches)), slog.String("first_idempotency_key", batches[0].key))
	p := t.pipeline(e, lk)
	p.serial = true
	return p.run(ctx, batches, nil, nil)
}

// recordedBatch turns a recorded batch back into one to send: its exact
// body, its key, and the items the body holds (for marks and splits). It
// is never forgotten unsent (resent), so it needs no position.
func recordedBatch(r checkpoint.Batch) (*batch, error) {
	items, err := thirdparty.DecodeBatch(r.Body)
	if err != nil {
		return nil, fmt.Errorf("exporter: recorded batch %d (%s): %w", r.Seq, r.Key, err)
	}
	if t, ok := tenantOfSalt(r.Salt); ok {
		// A lane's batch: every item is the tenant's, one Meta for all
		// (none has a kept digest).
		m := &feed.Meta{Tenant: t}
		for i := range items {
			items[i].Meta = m
		}
	}
	return &batch{name: r.Name, items: items, salt: r.Salt, key: r.Key, body: r.Body, seq: r.Seq, resent: true, at: r.Time.UTC()}, nil
}

// keepRecorded reports whether a recorded batch of the named checkpoint is
// still to be sent: not when it belongs to a replay that was cancelled or
// is gone.
func (e *Exporter) keepRecorded(ctx context.Context, name string) (bool, error) {
	o := checkpoint.OwnerOf(name)
	if o.Kind != checkpoint.KindReplay {
		return true, nil
	}
	cancelled, err := replays.Cancelled(ctx, e.pool, o.ReplayID)
	return !cancelled, err
}
