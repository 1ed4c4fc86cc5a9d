package exporter

import (
	"bytes"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// No request for an unchanged row (issue 45): a version whose body, as the
// destination renders it, equals the body the third party last accepted
// for its key is settled as skipped, marked as accepted, without a request.
// The reads move such items to feed.Page.Unchanged (bodies.leave); the
// marker settles them with their batch (bodies.queueSkipped) and keeps the
// digest of every body accepted (bodies.queueDigests). internal/unchanged
// computes the digests, keeps a configured source's and counts the skips;
// resources keeps its own on its rows (internal/resources, migration
// 033), written by the UPDATE that marks them.

// bodies is the unchanged stage of a target: how it compares its bodies
// with those last accepted. A nil *bodies compares none and keeps no
// digest.
type bodies struct {
	// feed names the feed in internal/unchanged: "resources" or the
	// configured source's name.
	feed string
	// tag is the destination's Source.BodyTag.
	tag string
	// skip is false for a replay of resources: a replay re-exports
	// whatever the third party has, and only keeps the digests.
	skip bool
	// rows: the digests are kept on the feed's rows (resources'
	// accepted_digest), by its marks, not in internal/unchanged's table.
	rows bool
}

// bodiesOf is the comparison of a source's target, nil when its
// destination has no BodyTag: nothing is skipped and no digest is kept.
func bodiesOf(s Source, skip bool) *bodies {
	if s.BodyTag == "" {
		return nil
	}
	return &bodies{feed: s.Name(), tag: s.BodyTag, skip: skip}
}

// rowBodiesOf is bodiesOf for resources, whose digests are kept on its
// rows and tombstones.
func rowBodiesOf(s Source, skip bool) *bodies {
	b := bodiesOf(s, skip)
	if b != nil {
		b.rows = true
	}
	return b
}

// onRows reports whether the digests are kept on the feed's rows.
func (b *bodies) onRows() bool { return b != nil && b.rows }

// kept is the feed name under which a target's reads return the kept
// digests with the items (feed.Page.Kept), "" when they need none: no
// comparison, or a replay's, which skips nothing.
func (b *bodies) kept() string {
	if b == nil || !b.skip {
		return ""
	}
	return b.feed
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

// leave moves the items of page whose body the third party already has
// to page.Unchanged: those whose digest is the one the read returned with
// them (feed.Item.Kept, read in the same statement as the items, so the
// comparison costs no statement of its own). A key in unsettled, of a
// batch sent and not yet marked (carried) or held, is never skipped: the
// third party's copy of it may be another body than the digest kept.
func (b *bodies) leave(page *feed.Page, unsettled map[string]struct{}) {
	if b == nil || !b.skip || !page.Kept {
		// No comparison, a replay's, or a read without the kept
		// digests (every live target's read has them).
		return
	}
	var kept []feed.Item
	var dg unchanged.Digester
	var sum []byte
	for i, it := range page.Items {
		if it.Kept() != nil {
			sum = dg.Append(sum[:0], b.tag, it)
		}
		same := it.Kept() != nil && bytes.Equal(it.Kept(), sum)
		if same {
			_, inDoubt := unsettled[it.ID]
			same = !inDoubt
		}
		switch {
		case same && kept == nil:
			// The first one: the items before it stay.
			kept = append(make([]feed.Item, 0, len(page.Items)-1), page.Items[:i]...)
			page.Unchanged = append(page.Unchanged, it)
		case same:
			page.Unchanged = append(page.Unchanged, it)
		case kept != nil:
			kept = append(kept, it)
		}
	}
	if kept != nil {
		page.Items = kept
	}
}

// queueSkipped settles items, whose body the third party already has, as
// skipped: marked as accepted (QueueMarks, with the batch's accepted
// items, by the caller) and counted. It is the one place a version is
// settled skipped: the row's history records it here (issue 45, helper
// "history": a settlement of kind skipped per item).
func (b *bodies) queueSkipped(qb *pgx.Batch, items []feed.Item) {
	if b == nil || len(items) == 0 {
		return
	}
	unchanged.QueueSkipped(qb, b.feed, len(items))
}

// queueDigests keeps the digest of every body of b the third party
// accepted, and drops those of keys whose copy there is in doubt: a batch
// resent from its record (its items' bodies are not this process's
// renderings) and items deferred after a transient answer of their own.
// The digests of keys that had none when read are written as new ones
// (unchanged.QueueSettled's fresh).
func (bs *bodies) queueDigests(qb *pgx.Batch, b *batch, bufs *digestBufs) {
	if bs == nil || b.out == nil {
		return
	}
	if bs.rows {
		bs.queueRowDigests(qb, b)
		return
	}
	var keep, fresh *unchanged.Digests
	var drop []string
	for _, it := range b.out.Accepted {
		switch {
		case b.resent:
			drop = append(drop, it.ID)
		case bs.skip && it.Kept() == nil:
			// Read with the kept digests (a live target's read), and
			// none was kept: most likely none is now either.
			if fresh == nil {
				fresh = bufs.take(len(b.out.Accepted))
			}
			fresh.Add(bs.tag, it)
		default:
			if keep == nil {
				keep = bufs.take(len(b.out.Accepted))
			}
			keep.Add(bs.tag, it)
		}
	}
	for _, d := range b.out.Deferred {
		drop = append(drop, d.Item.ID)
	}
	unchanged.QueueSettledDigests(qb, bs.feed, b.tenant().String(), keep, fresh, drop)
}

// queueRowDigests is queueDigests for resources: on its rows and
// tombstones (resources.QueueDigests).
func (bs *bodies) queueRowDigests(qb *pgx.Batch, b *batch) {
	var rows, tombstones resources.Digests
	var forgetRows, forgetTombstones []int64
	var dg unchanged.Digester
	forget := func(it feed.Item) {
		id, err := strconv.ParseInt(it.ID, 10, 64)
		if err != nil {
			return // not a row of resources: no digest of it is kept
		}
		if it.Deleted {
			forgetTombstones = append(forgetTombstones, id)
		} else {
			forgetRows = append(forgetRows, id)
		}
	}
	for _, it := range b.out.Accepted {
		if b.resent {
			forget(it)
			continue
		}
		id, err := strconv.ParseInt(it.ID, 10, 64)
		if err != nil {
			continue
		}
		sum := dg.Append(nil, bs.tag, it)
		if it.Deleted {
			tombstones.Add(id, sum)
		} else {
			rows.Add(id, sum)
		}
	}
	for _, d := range b.out.Deferred {
		forget(d.Item)
	}
	resources.QueueDigests(qb, rows, tombstones, forgetRows, forgetTombstones)
}

// rowDigests are the digests of b's accepted bodies, in their order, for
// a feed that keeps them on its rows and composes them with its marks;
// nil when none are kept.
func (bs *bodies) rowDigests(b *batch, bufs *digestBufs) *unchanged.Digests {
	if !bs.onRows() {
		return nil
	}
	ds := bufs.take(len(b.out.Accepted))
	for _, it := range b.out.Accepted {
		ds.Add(bs.tag, it)
	}
	return ds
}

// composeDigests adds to s the digests of b's accepted bodies under keys,
// as queueDigests would queue them for a batch not resent and none
// deferred: false, adding nothing, when some are fresh and some not.
func (bs *bodies) composeDigests(s *compose.Statement, b *batch, keys string, bufs *digestBufs) bool {
	acc := b.out.Accepted
	fresh := bs.skip && acc[0].Kept() == nil
	for _, it := range acc[1:] {
		if (bs.skip && it.Kept() == nil) != fresh {
			return false
		}
	}
	ds := bufs.take(len(acc))
	for _, it := range acc {
		ds.Add(bs.tag, it)
	}
	unchanged.ComposeSettled(s, bs.feed, b.tenant().String(), keys, ds, fresh)
	return true
}

// digestBufs are the Digests a marker's transactions queue, kept from one
// transaction to the next: a drain's marker queued two arrays and a
// buffer of digests a batch (about 70 bytes a row), and its pipe has
// encoded a transaction's arguments before the next is built. The nil
// digestBufs makes new ones.
type digestBufs struct {
	ds   []*unchanged.Digests
	used int
}

// reset makes every Digests free again, at a transaction's start.
func (d *digestBufs) reset() {
	if d != nil {
		d.used = 0
	}
}

// take returns empty Digests with room for n keys.
func (d *digestBufs) take(n int) *unchanged.Digests {
	if d == nil {
		return unchanged.NewDigests(n)
	}
	if d.used == len(d.ds) {
		d.ds = append(d.ds, unchanged.NewDigests(n))
	}
	ds := d.ds[d.used]
	d.used++
	ds.Reset(n)
	return ds
}
