package exporter

import (
	"context"
	"time"
)

// reader reads a feed's batches ahead of the pushers, in the feed's order.
type reader struct {
	ch     chan fetched
	cancel context.CancelFunc
	done   chan struct{}
}

type fetched struct {
	b   *batch
	err error
}

// startReader reads f after startAfter until the feed is exhausted,
// maxBatches were read (0: no limit) or until has passed (zero: never).
// One batch waits in the channel while the next is read; the pipeline
// bounds what it holds beyond that.
func (e *Exporter) startReader(ctx context.Context, f Feed, startAfter int64, maxBatches int, until time.Time) *reader {
	rctx, cancel := context.WithCancel(ctx)
	r := &reader{ch: make(chan fetched, 1), cancel: cancel, done: make(chan struct{})}
	cur := f.Open(startAfter)
	go func() {
		defer close(r.done)
		defer close(r.ch)
		for n := 0; maxBatches == 0 || n < maxBatches; n++ {
			if !until.IsZero() && e.now().After(until) {
				return
			}
			page, err := cur.Next(rctx)
			if err == nil && page.Empty() {
				return
			}
			var fe fetched
			if err != nil {
				fe.err = err
			} else {
				fe.b = e.newBatch(f.Checkpoint(), page)
			}
			select {
			case r.ch <- fe:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

// stop ends the reader and waits for it.
func (r *reader) stop() {
	r.cancel()
	for range r.ch {
	}
	<-r.done
}
