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
	// composeAccepted adds to s the marks of accepted, none a
	// tombstone, and returns expressions of s that are their keys
	// (text[]) and versions (bigint[]) in accepted's order. digests,
	// when not nil, are accepted's bodies' digests in their order, for a
	// feed that keeps them on its rows with the marks (resources).
	composeAccepted(s *compose.Statement, accepted []feed.Item, digests *unchanged.Digests) (keys, versions string, err error)
}

// composes reports whether b's marks, story and digests go in one
// statement: b answered, every item accepted, not resent, by a feed
// that composes them, and no tombstone among them.
func (m *marker) composes(b *batch) bool {
	if _, ok := m.feed.(composer); !ok || b.out == nil || b.resent || len(b.out.Accepted) == 0 ||
		len(b.out.Rejected)+len(b.out.Deferred)+len(b.oversize)+len(b.unchanged) > 0 {
		return false
	}
	for _, it := range b.out.Accepted {
		if it.Deleted {
			return false
		}
	}
	return true
}

// queueComposed queues on qb the marks of b, which composes, with its
// story and its digests in one statement where they compose (a story of
// more than one request, digests of fresh and kept keys mixed, are
// queued apart, as before).
func (m *marker) queueComposed(qb *pgx.Batch, b *batch, digests *digestBufs, arrays *history.Arrays) error {
	var s compose.Statement
	keys, versions, err := m.feed.(composer).composeAccepted(&s, b.out.Accepted, m.bodies.rowDigests(b, digests))
	if err != nil {
		return err
	}
	m.story.compose(qb, &s, b, keys, versions, arrays)
	if m.bodies != nil && !m.bodies.onRows() && !m.bodies.composeDigests(&s, b, keys, digests) {
		m.bodies.queueDigests(qb, b, digests)
	}
	s.Queue(qb, "exporter: mark "+b.name)
	return nil
}

// composedItems are the accepted items of batches.
func composedItems(batches []*batch) []feed.Item {
	var out []feed.Item
	for _, b := range batches {
		out = append(out, b.out.Accepted...)
	}
	return out
}
