// Package feed is what every exported stream hands the pipeline, in one
// shape: resources' pending rows, a replay's range of them, and each
// configured source's pending keys are all pages of Items read within one
// set of Limits. A rule written here (the largest item, the bytes of a
// batch) holds for every feed; the pipeline (internal/exporter) knows a
// feed only through these types, and the package that owns a feed's
// tables (internal/resources, internal/sources) reads and marks it.
package feed

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Item is one exported item at one version: a row of resources or a
// source's key, with its payload, or the tombstone of a deleted one. Its id
// is the text the wire carries: a row's id in decimal, a source's key in
// its text form.
//
// An Item is copied by value along the pipeline (a page, a batch, a
// request, an outcome): it is kept to 72 bytes, what the wire carries and
// the capture time, with what only some feeds have (a tenant, a kept
// digest) behind Meta (issue 55: at 120 bytes its copies were a tenth of
// what a drain allocated).
type Item struct {
	ID      string
	Version int64
	// Payload is written to the wire as is; it must be valid JSON (a jsonb
	// value always is). An empty Payload is sent as null.
	Payload json.RawMessage
	// CapturedAt is when the version was captured, in microseconds since
	// the Unix epoch (PostgreSQL's precision): the start of the
	// transaction that wrote it (resources.changed_at, or the latest
	// changed_at among a source key's pending changes:
	// sources.Row.Captured says when that differs), for its story
	// (internal/history); 0 when the read does not say. Captured and
	// SetCaptured read and write it as a time.
	CapturedAt int64
	// Meta is what a feed with tenants or kept digests says of the item;
	// nil when it says nothing.
	Meta *Meta
	// Deleted makes the item a tombstone: it is sent with "deleted": true
	// and no payload.
	Deleted bool
}

// Meta is what only some feeds say of an item.
type Meta struct {
	// Tenant is the tenant whose item it is, for a source with a tenant
	// column (docs/protocol.md section 10); empty otherwise. It is not
	// part of the wire's item: it says where the item goes.
	Tenant string
	// Kept is the digest of the body last accepted for the item's key
	// (internal/unchanged), read with the item when its feed was asked
	// for it (Page.Kept); nil when none is kept.
	Kept []byte
}

// Tenant is the item's Meta.Tenant, "" without one.
func (it Item) Tenant() string {
	if it.Meta == nil {
		return ""
	}
	return it.Meta.Tenant
}

// Kept is the item's Meta.Kept, nil without one.
func (it Item) Kept() []byte {
	if it.Meta == nil {
		return nil
	}
	return it.Meta.Kept
}

// Captured is CapturedAt as a time, zero when it is 0.
func (it Item) Captured() time.Time {
	if it.CapturedAt == 0 {
		return time.Time{}
	}
	return time.UnixMicro(it.CapturedAt)
}

// SetCaptured sets CapturedAt to t (0 for the zero time).
func (it *Item) SetCaptured(t time.Time) {
	if t.IsZero() {
		it.CapturedAt = 0
		return
	}
	it.CapturedAt = t.UnixMicro()
}

// MetaOf returns a Meta of tenant and kept from metas, a page's backing
// array of n Metas at first (one allocation a page, not one an item), or
// nil when both are empty.
func MetaOf(metas *[]Meta, n int, tenant string, kept []byte) *Meta {
	if tenant == "" && kept == nil {
		return nil
	}
	if len(*metas) == cap(*metas) {
		// A new array: the Metas handed out point into the last one.
		*metas = make([]Meta, 0, max(n, 2*cap(*metas), 1))
	}
	*metas = append(*metas, Meta{Tenant: tenant, Kept: kept})
	return &(*metas)[len(*metas)-1]
}

// Defaults for Limits.
const (
	// ItemsDefault is the default Limits.Items.
	ItemsDefault = 500
	// BytesDefault is the default Limits.Bytes.
	BytesDefault = 4 << 20
	// MaxItemBytesDefault is the default Limits.MaxItemBytes.
	MaxItemBytesDefault = 16 << 20
)

// Limits bound one page of a feed, whichever it is.
type Limits struct {
	// Items is the most items a page holds. Defaults to ItemsDefault.
	Items int
	// Bytes is the most payload bytes a page holds; a single item larger
	// than this (and within MaxItemBytes) still forms a page of its own.
	// Defaults to BytesDefault.
	Bytes int
	// MaxItemBytes is the largest payload read and sent: a larger item
	// comes without it, as an Oversize, to be recorded failed with the
	// reason, and is never read whole. Defaults to MaxItemBytesDefault.
	MaxItemBytes int
}

// Validate returns an error naming the first limit that is not set. The
// readers of a feed take Limits whole, as the exporter's Config defaulted
// them (WithDefaults, once, in exporter.New), and refuse incomplete ones
// rather than read pages of nothing or count every payload oversize.
func (l Limits) Validate() error {
	switch {
	case l.Items <= 0:
		return fmt.Errorf("feed: limits: Items must be positive, got %d", l.Items)
	case l.Bytes <= 0:
		return fmt.Errorf("feed: limits: Bytes must be positive, got %d", l.Bytes)
	case l.MaxItemBytes <= 0:
		return fmt.Errorf("feed: limits: MaxItemBytes must be positive, got %d", l.MaxItemBytes)
	}
	return nil
}

// WithDefaults returns l with every unset limit at its default.
func (l Limits) WithDefaults() Limits {
	if l.Items <= 0 {
		l.Items = ItemsDefault
	}
	if l.Bytes <= 0 {
		l.Bytes = BytesDefault
	}
	if l.MaxItemBytes <= 0 {
		l.MaxItemBytes = MaxItemBytesDefault
	}
	return l
}

// Start is the position before every item: keyset reads take ids after
// the position, and any id a bigint holds, zero and negative ones
// included, is exported.
const Start int64 = math.MinInt64

// Oversize is an item too large to send (Limits.MaxItemBytes): it is
// recorded failed at its version with the reason, never sent.
type Oversize struct {
	ID      string
	Version int64
	// Bytes is the payload's size, as far as it was measured.
	Bytes int64
}

// Page is one read of a feed: the items of one request, in the feed's
// order, with the salt of their Idempotency-Key.
type Page struct {
	Items    []Item
	Oversize []Oversize
	// Unchanged are items whose body the third party already has (the
	// exporter moves them here from Items: internal/unchanged): settled as
	// skipped with the page's batch, never sent.
	Unchanged []Item
	// Kept says that the read returned each item's Kept digest with it:
	// the comparison with the bodies last accepted needs no read of its
	// own.
	Kept bool
	// Salt separates the keys of this feed's batches from every other
	// feed's (a replay's from the live export's, a source's from another).
	Salt string
	// Position is where the next read of the pass starts, and what the
	// feed's checkpoint records with the page: a replay resumes after it.
	// A feed whose passes always read from its first pending item (a
	// source: a marked key leaves its change log) has no position and
	// leaves it 0.
	Position int64
	// Tenant is the tenant every item of the page belongs to, for a source
	// with a tenant column: a page is one tenant's, so a batch is. Empty
	// otherwise.
	Tenant string
}

// Empty reports whether the page holds nothing at all: the feed is
// exhausted.
func (p Page) Empty() bool { return len(p.Items) == 0 && len(p.Oversize) == 0 && len(p.Unchanged) == 0 }
