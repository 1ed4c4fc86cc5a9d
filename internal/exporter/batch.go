package exporter

// A batch and how a page of a feed becomes one: the unit the pipeline
// (pipeline.go) records, pushes and marks.

import (
	"fmt"
	"time"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// batch is one request's worth of a feed's items on its way through the
// pipeline: read, recorded (seq set), sent, answered (out set), marked.
type batch struct {
	name  string // the checkpoint it belongs to
	items []feed.Item
	salt  string
	key   string
	body  []byte
	// at is when the batch was made, recorded with it: formats whose
	// bodies carry a time render this one, on every send.
	at time.Time
	// position is the feed's position after the batch, recorded with it
	// (feed.Page.Position).
	position int64
	seq      int64 // set once a committed record covers the batch
	// recording is set while a marker transaction in flight records the
	// batch: it is not recorded twice.
	recording bool
	out       *delivery.Outcome
	// oversize are items too large to send: recorded failed with the
	// batch's outcome, never sent.
	oversize []feed.Oversize
	// unchanged are items whose body the third party already has: settled
	// as skipped with the batch's outcome, never sent (unchanged.go).
	unchanged []feed.Item
	// resent marks a batch a previous holder recorded: it may have reached
	// the third party, so it stays recorded until it is marked, even if
	// this run never sends it.
	resent bool
	// inherited marks a batch an earlier pass sent and left unmarked
	// (carried): this pass writes its outcome and does not count it again.
	inherited bool
}

// tenant is the tenant whose batch b is, by its salt (tenant.Salt): a
// lane's batch is one tenant's, and a batch resent after a crash has no
// item decoded with its tenant. The zero Tenant outside lanes.
func (b *batch) tenant() tenant.Tenant {
	t, _ := tenant.OfSalt(b.salt)
	return t
}

func (b *batch) record() checkpoint.Batch {
	return checkpoint.Batch{Name: b.name, Key: b.key, Salt: b.salt, Items: len(b.items), Body: b.body, Time: b.at}
}

// newBatch encodes a page of a feed as one request under the
// installation's key. Items too large to send stay out of the request; a
// batch of nothing else is only marked.
func (e *Exporter) newBatch(name string, p feed.Page) *batch {
	b := &batch{name: name, salt: p.Salt, items: p.Items, oversize: p.Oversize, unchanged: p.Unchanged, position: p.Position, at: batchTime()}
	if len(b.items) > 0 {
		// The items' payloads become slices of the body: a batch keeps
		// one copy of them while it waits to be sent and marked.
		b.body = thirdparty.AppendBatchShared(nil, b.items)
		b.key = thirdparty.BatchKey(e.cfg.Installation, b.salt, b.body)
	}
	return b
}

// batchTime is a new batch's time, in whole seconds (what formats write,
// and what the record keeps exactly).
func batchTime() time.Time { return time.Now().UTC().Truncate(time.Second) }

// sourceOf names what a checkpoint's batches are rows of, for formats that
// say it: a configured source's name, or "resources".
func sourceOf(checkpointName string) string {
	if o := checkpoint.OwnerOf(checkpointName); o.Kind == checkpoint.KindSource {
		return o.Source
	}
	return delivery.SourceDefault
}

// oversizeError says why an item was never sent.
func oversizeError(o feed.Oversize, lim feed.Limits) string {
	return fmt.Sprintf("payload of %d bytes is larger than SYNCER_MAX_ITEM_BYTES (%d): not sent; shrink the row, or raise the limit and run syncer retry-failed",
		o.Bytes, lim.MaxItemBytes)
}
