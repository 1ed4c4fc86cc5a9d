package exporter

import (
	"context"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/feed"
)

// reader reads a feed's batches ahead of the pushers, in the feed's order.
type reader struct {
	ch     chan fetched
	cancel context.CancelFunc
	done   chan struct{}
	// timeUp is closed when the reader stopped because until passed.
	timeUp chan struct{}
}

type fetched struct {
	b   *batch
	err error
}

// startReader reads cur, a cursor of feed f, until the feed is exhausted,
// maxBatches were read (0: no limit) or until has passed (zero: never);
// first, when not nil, is a page already read from it, sent first. One
// batch waits in the channel while the next is read; the pipeline bounds
// what it holds beyond that. Items in skip (at their version) are left out
// of the batches: an earlier pass sent them and their outcomes are not
// written yet. leave moves the items of each page read whose body the
// third party already has to its Unchanged (first was read through it).
//
// goOn, when not nil, is asked each time until passes: true moves until
// on by PassLength (a lane's pass with nothing waiting for its end,
// lanepass.go).
func (e *Exporter) startReader(ctx context.Context, f Feed, cur Cursor, first *feed.Page, maxBatches int, until time.Time, skip sentItems,
	leave func(context.Context, *feed.Page) error, goOn func() bool) *reader {
	rctx, cancel := context.WithCancel(ctx)
	r := &reader{ch: make(chan fetched, 1), cancel: cancel, done: make(chan struct{}), timeUp: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer close(r.ch)
		for n := 0; maxBatches == 0 || n < maxBatches; n++ {
			if first == nil && !until.IsZero() && e.now().After(until) {
				if goOn == nil || !goOn() {
					close(r.timeUp)
					return
				}
				until = e.now().Add(e.cfg.PassLength)
			}
			var page feed.Page
			var err error
			if first != nil {
				page, first = *first, nil
			} else {
				page, err = cur.Next(rctx)
				if err == nil && page.Empty() {
					return
				}
				if err == nil && skip.leaveOut(&page) {
					continue
				}
				if err == nil {
					err = leave(rctx, &page)
				}
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

// sentItems are the items of batches sent and answered whose outcomes are
// not written yet, by id and version: they still read as pending, and
// must not go again under another key. A later version of the same id is
// a change of its own, and goes.
type sentItems map[sentItem]struct{}

type sentItem struct {
	id      string
	version int64
}

// sentIn returns the items of bs, and nil when they hold none.
func sentIn(bs []*batch) sentItems {
	var s sentItems
	for _, b := range bs {
		for _, it := range b.items {
			s = s.add(it.ID, it.Version)
		}
		for _, o := range b.oversize {
			s = s.add(o.ID, o.Version)
		}
		for _, it := range b.unchanged {
			s = s.add(it.ID, it.Version)
		}
	}
	return s
}

func (s sentItems) add(id string, version int64) sentItems {
	if s == nil {
		s = sentItems{}
	}
	s[sentItem{id, version}] = struct{}{}
	return s
}

// leaveOut removes s's items from p and reports whether nothing is left.
func (s sentItems) leaveOut(p *feed.Page) bool {
	if len(s) == 0 {
		return false
	}
	p.Items = slices.DeleteFunc(p.Items, func(it feed.Item) bool { _, ok := s[sentItem{it.ID, it.Version}]; return ok })
	p.Oversize = slices.DeleteFunc(p.Oversize, func(o feed.Oversize) bool { _, ok := s[sentItem{o.ID, o.Version}]; return ok })
	return p.Empty()
}
