package exporter

import (
	"context"
	"time"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/locks"
)

// pass pushes f's items after startAfter to dest until the feed is
// exhausted, maxBatches were read (0: no limit), or until has passed
// (zero: never).
func (e *Exporter) pass(ctx context.Context, lk *locks.Lock, t target, startAfter int64, maxBatches int, until time.Time) (passResult, error) {
	return e.carryingPass(ctx, lk, t, startAfter, maxBatches, until, nil)
}

// carryingPass is pass, with c (when not nil) the batches an earlier pass
// of t's feed left unmarked: this one writes their outcomes with its first
// record and reads past their items. With c.on, it leaves in c what it
// has answered at its end (see carried).
func (e *Exporter) carryingPass(ctx context.Context, lk *locks.Lock, t target, startAfter int64, maxBatches int, until time.Time, c *carried) (passResult, error) {
	p := t.pipeline(e, lk)
	p.start, p.res.position = startAfter, startAfter
	var skip sentItems
	if c != nil {
		p.carried, p.carry = c.batches, c.on
		skip = sentIn(c.batches)
		c.batches = nil
	}
	// Keys held after a transient answer of their own wait for their
	// time (heldkeys).
	hs, err := e.heldKeys.Holding(ctx, t.feed.Checkpoint())
	for _, h := range hs {
		skip = skip.add(h.Key, h.Version)
	}
	if err != nil {
		if c != nil {
			c.batches = p.carried
		}
		return passResult{}, err
	}
	p.unsettled = skip.ids()
	// A lane's tenants set aside have their recorded batches sent again
	// first, beside this pass's reads (aside.go).
	var resend []*batch
	if rs, ok := t.feed.(resender); ok {
		if resend, err = rs.resends(ctx, p.carried); err != nil {
			if c != nil {
				c.batches = p.carried
			}
			return passResult{}, err
		}
	}
	cur := t.feed.Open(startAfter)
	goOn := e.passGoesOn(ctx, t, cur, len(hs) == 0 && len(resend) == 0)
	if p.carry && len(resend) == 0 {
		// A poll: its first read is made here, and a look that finds
		// one page, the end of its feed, goes no further than lookOnce.
		var first *feed.Page
		var more bool
		first, more, err = p.look(ctx, cur, skip)
		if err == nil && more {
			rd := e.startReader(ctx, t.feed, cur, first, maxBatches, until, skip, p.leaveUnchanged, goOn)
			err = p.run(ctx, nil, rd, e.isStopping)
		}
	} else {
		rd := e.startReader(ctx, t.feed, cur, nil, maxBatches, until, skip, p.leaveUnchanged, goOn)
		// The reader closes its channel at the end of the feed, at
		// maxBatches or at until; only the first means the pass is
		// done.
		err = p.run(ctx, resend, rd, e.isStopping)
	}
	if c != nil {
		c.batches = p.carried
	}
	res := passResult{rows: p.res.rows, batches: p.res.batches, position: p.res.position}
	if err == nil {
		res.done = (maxBatches == 0 || p.res.batches < maxBatches) && (until.IsZero() || e.now().Before(until))
	}
	return res, err
}
