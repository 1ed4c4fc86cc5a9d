package exporter

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// No request for an unchanged row (issue 45): a version whose body, as the
// destination renders it, equals the body the third party last accepted
// for its key is settled as skipped, marked as accepted, without a request.
// The reads move such items to feed.Page.Unchanged (leaveUnchanged); the
// marker settles them with their batch (queueSkipped) and keeps the digest
// of every body accepted (queueDigests). internal/unchanged keeps the
// digests and the counts. For a source with a tenant column a page and a
// batch are one tenant's, and the digests are that tenant's (its own
// account's copy).

// bodies is how a target compares its bodies with those last accepted.
type bodies struct {
	// feed names the feed in internal/unchanged: "resources" or the
	// configured source's name.
	feed string
	// tag is the destination's Source.BodyTag.
	tag string
	// skip is false for a replay of resources: a replay re-exports
	// whatever the third party has, and only keeps the digests.
	skip bool
}

// bodiesOf is the comparison of a source's target, nil when its
// destination has no BodyTag: nothing is skipped and no digest is kept.
func bodiesOf(s Source, skip bool) *bodies {
	if s.BodyTag == "" {
		return nil
	}
	return &bodies{feed: s.Name(), tag: s.BodyTag, skip: skip}
}

// ids are the ids of s's items, whatever their version; nil for none.
func (s sentItems) ids() map[string]struct{} {
	var out map[string]struct{}
	for it := range s {
		if out == nil {
			out = make(map[string]struct{}, len(s))
		}
		out[it.id] = struct{}{}
	}
	return out
}

// leaveUnchanged moves the items of page whose body the third party
// already has to page.Unchanged. A key of a batch sent and not yet marked
// (carried) or held is never skipped: the third party's copy of it may be
// another body than the digest kept.
func (p *pipeline) leaveUnchanged(ctx context.Context, page *feed.Page) error {
	b := p.bodies
	if b == nil || !b.skip || len(page.Items) == 0 {
		return nil
	}
	ids := make([]string, 0, len(page.Items))
	digests := make([][]byte, 0, len(page.Items))
	for _, it := range page.Items {
		if _, ok := p.unsettled[it.ID]; ok {
			continue
		}
		ids = append(ids, it.ID)
		digests = append(digests, unchanged.Digest(b.tag, it))
	}
	same, err := unchanged.Same(ctx, p.e.pool, b.feed, page.Tenant, ids, digests)
	if err != nil || len(same) == 0 {
		return err
	}
	kept := page.Items[:0:0]
	for _, it := range page.Items {
		if same[it.ID] {
			page.Unchanged = append(page.Unchanged, it)
		} else {
			kept = append(kept, it)
		}
	}
	page.Items = kept
	return nil
}

// queueSkipped settles items, whose body the third party already has, as
// skipped: marked as accepted (QueueMarks, with the batch's accepted
// items, by the caller) and counted. It is the one place a version is
// settled skipped: the row's history records it here (issue 45, helper
// "history": a settlement of kind skipped per item).
func (p *pipeline) queueSkipped(qb *pgx.Batch, items []feed.Item) {
	if p.bodies == nil || len(items) == 0 {
		return
	}
	unchanged.QueueSkipped(qb, p.bodies.feed, len(items))
}

// queueDigests keeps the digest of every body of b the third party
// accepted, and drops those of keys whose copy there is in doubt: a batch
// resent from its record (its items' bodies are not this process's
// renderings) and items deferred after a transient answer of their own.
func (p *pipeline) queueDigests(qb *pgx.Batch, b *batch) {
	if p.bodies == nil || b.out == nil {
		return
	}
	keep := map[string][]byte{}
	var drop []string
	for _, it := range b.out.Accepted {
		if b.resent {
			drop = append(drop, it.ID)
			continue
		}
		keep[it.ID] = unchanged.Digest(p.bodies.tag, it)
	}
	for _, d := range b.out.Deferred {
		drop = append(drop, d.Item.ID)
	}
	tenant, _ := tenantOfSalt(b.salt) // a lane's batch is one tenant's; "" outside lanes
	unchanged.QueueSettled(qb, p.bodies.feed, tenant, keep, drop)
}
