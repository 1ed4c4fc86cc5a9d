package exporter

import (
	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// A batch answered all accepted (a drain's every batch) is marked, its
// story written and its digests kept by one statement (internal/compose)
// whose pieces share the batch's keys and versions, sent once (issue 55:
// three statements a batch, each with its own copy of the keys, were a
// fifth of what a drain allocated, and what the drain lost against
// 3cfe467 in the marker). Each piece is its table owner's: the marks
// internal/resources', the story internal/history's, the digests
// internal/unchanged's. The statement is queued in the marker
// transaction in the place of the three it replaces: what commits
// together is what committed together before.

// composer is a feed whose accepted items' marks compose with their story
// and their digests into one statement.
type composer interface {
	// composeAccepted adds to s the marks of accepted and returns
	// expressions of s that are their keys (text[]) and versions
	// (bigint[]) in accepted's order; false, adding nothing, when it
	// cannot (a tombstone among them).
	composeAccepted(s *compose.Statement, accepted []feed.Item) (keys, versions string, ok bool)
}

// queueComposed queues on qb the marks of b, all accepted and the one
// batch of its checkpoint the transaction marks, with its story and its
// digests in one statement where they compose (a story of more than one
// request, digests of fresh and kept keys mixed, go apart as before). It
// reports false, queueing nothing, when b's marks do not compose: the
// caller queues all three apart.
func (p *pipeline) queueComposed(qb *pgx.Batch, b *batch, digests *digestBufs, arrays *history.Arrays) bool {
	c, ok := p.feed.(composer)
	if !ok || b.out == nil || b.resent || len(b.out.Accepted) == 0 ||
		len(b.out.Rejected)+len(b.out.Deferred)+len(b.oversize)+len(b.unchanged) > 0 {
		return false
	}
	var s compose.Statement
	keys, versions, ok := c.composeAccepted(&s, b.out.Accepted)
	if !ok {
		return false
	}
	if !p.e.cfg.NoHistory {
		h := p.historyOf(b, b.out.Attempts)
		h.Accepted = b.out.Accepted
		if !h.ComposeRequest(&s, keys, versions) {
			p.queueHistory(qb, b, arrays)
		}
	}
	if p.bodies != nil && !p.composeDigests(&s, b, keys, digests) {
		p.queueDigests(qb, b, digests)
	}
	s.Queue(qb, "exporter: mark "+b.name)
	return true
}

// composeDigests adds to s the digests of b's accepted bodies under keys,
// as queueDigests would queue them for a batch not resent and none
// deferred: false, adding nothing, when some are fresh and some not.
func (p *pipeline) composeDigests(s *compose.Statement, b *batch, keys string, bufs *digestBufs) bool {
	acc := b.out.Accepted
	fresh := p.bodies.skip && acc[0].Kept == nil
	for _, it := range acc[1:] {
		if (p.bodies.skip && it.Kept == nil) != fresh {
			return false
		}
	}
	ds := bufs.take(len(acc))
	for _, it := range acc {
		ds.Add(p.bodies.tag, it)
	}
	tenant, _ := tenantOfSalt(b.salt) // a lane's batch is one tenant's; "" outside lanes
	unchanged.ComposeSettled(s, p.bodies.feed, tenant, keys, ds, fresh)
	return true
}
