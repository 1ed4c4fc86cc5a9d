package exporter

import (
	"cmp"
	"context"
	"errors"

	"github.com/syncer-dev/syncer/internal/feed"
)

// A hot look while writes flow finds a few rows: one page, the end of its
// feed. The pipeline's reader, marker and pushers are goroutines started
// for each pass, and for such a look they were about a tenth of its CPU: the
// hand-offs between them, and the stacks each grows anew through pgx and
// net/http (docs/benchmarks.md, "One transaction a look"). So a poll makes
// its first read itself, and when that page ends the feed it records,
// sends and answers the batch in the job's goroutine (lookOnce), in the
// same order and under the same rules as the pipeline: the record commits
// before the push, with the outcomes the last look carried, and the
// answered batch is carried to the next. Any other look goes through the
// pipeline, from the page read.

// look makes a poll's first read from cur, past the items in skip. It
// handles a look that finds nothing or one page that ends the feed, and
// otherwise returns more, with the page read (nil when skip left nothing
// of it), for the pipeline to go on from.
func (p *pipeline) look(ctx context.Context, cur Cursor, skip sentItems) (first *feed.Page, more bool, err error) {
	page, err := cur.Next(ctx)
	if err != nil {
		// The carried outcomes are still written.
		return nil, false, cmp.Or(p.writeCarried(ctx), err)
	}
	if page.Empty() {
		return nil, false, p.writeCarried(ctx)
	}
	if skip.leaveOut(&page) {
		// Only carried items: the rest of the feed, if any, is the
		// pipeline's.
		if cur.Ended() {
			return nil, false, p.writeCarried(ctx)
		}
		return nil, true, nil
	}
	if err := p.leaveUnchanged(ctx, &page); err != nil {
		return nil, false, cmp.Or(p.writeCarried(ctx), err)
	}
	if !cur.Ended() || len(page.Items) == 0 {
		// More pages, or only items too large to send or unchanged: the
		// pipeline's.
		return &page, true, nil
	}
	return nil, false, p.lookOnce(ctx, page)
}

// writeCarried writes the outcomes of the batches the last look carried.
func (p *pipeline) writeCarried(ctx context.Context) error {
	if len(p.carried) == 0 {
		return nil
	}
	return p.run(ctx, nil, nil, nil)
}

// lookOnce records page's batch with the carried outcomes, sends it and
// carries it answered.
func (p *pipeline) lookOnce(ctx context.Context, page feed.Page) error {
	e := p.e
	b := e.newBatch(p.feed.Checkpoint(), page)
	inherited := p.carried
	p.carried = nil
	for _, c := range inherited {
		c.inherited = true
	}
	pipe := p.lk.NewPipe()
	m := p.mark.send(ctx, pipe, nil, markReq{marks: inherited, records: []*batch{b}})
	if m.err == nil {
		m = p.mark.receive(ctx, pipe, m)
	}
	pipe.Close()
	if m.err != nil {
		// Nothing committed: the carried batches stay recorded, for the
		// next holder to resend, and this one was never recorded.
		return m.err
	}
	b.seq = m.seqs[0]
	if e.isStopping() {
		// Recorded and never sent: forgotten, as the pipeline forgets
		// its unsent batches, and read again by the next run.
		return cmp.Or(p.mark.forgetUnsent(ctx, b.name, []int64{b.seq}, p.start), errStopping)
	}
	out, err := p.pusher.push(ctx, b)
	if lr := (*leftRecorded)(nil); errors.As(err, &lr) {
		// Its tenant is set aside (aside.go): recorded, not carried.
		return nil
	}
	if err != nil {
		// Sent, maybe received: it stays recorded.
		return err
	}
	b.out = out
	p.res.add(b)
	p.carried = []*batch{b}
	return nil
}
