package exporter

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter/heldkeys"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/holds"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// markReq is what one marker transaction writes: the outcomes of answered
// batches, and the records of batches about to be sent.
type markReq struct {
	marks, records []*batch
}

// items counts the items of r's batches.
func (r markReq) items() int {
	n := 0
	for _, b := range r.marks {
		n += len(b.items) + len(b.oversize)
	}
	for _, b := range r.records {
		n += len(b.items)
	}
	return n
}

// marker is the mark stage of a pipeline: it writes answered batches'
// outcomes (marks, failures, their story, their digests, their held keys)
// and records the batches about to be sent, in transactions on the
// export lock's session, which the lock's loss fences.
type marker struct {
	lk   *locks.Lock
	feed Feed
	// dest's hold policy holds deferred keys; destName names it in the
	// held keys' log lines.
	dest     Destination
	destName string
	held     *heldkeys.Keys
	bodies   *bodies
	story    *story
	logger   *slog.Logger
}

// run runs the pipeline's marker transactions on the lock's session, in
// the order handed, until reqs is closed, and reports each on out. It keeps
// up to two in flight (locks.Pipe): while one runs, the next is already on
// the wire, so PostgreSQL starts it the moment the first commits instead of
// idling while the answer goes out and the next transaction comes in. A
// transaction only commits if the one before it did. The marks run even
// when the job is being cancelled: what the third party accepted must be
// recorded.
func (m *marker) run(ctx context.Context, reqs <-chan markReq, out chan<- marked) {
	pipe := m.lk.NewPipe()
	defer pipe.Close()
	// The transactions' arguments are built in buffers kept from one to
	// the next: the pipe has encoded a transaction's when send returns.
	bufs := &markBufs{}
	var sent []marked
	// The marker waits for the next transaction's content for up to three
	// quarters of the shortest of the last transactions' times, before it
	// blocks on the oldest's answer. An underestimate costs an overlap; an
	// overestimate leaves an answer unread while its batches wait to be
	// pushed, so one slow transaction (a checkpoint's flush) must not
	// lengthen the waits after it.
	var recent [8]time.Duration
	var n int
	var headSince time.Time
	shortest := func() time.Duration {
		m := time.Duration(0)
		for i := range min(n, len(recent)) {
			if i == 0 || recent[i] < m {
				m = recent[i]
			}
		}
		return m
	}
	// failed is the error of a transaction that did not commit. Nothing
	// handed after it is sent: the pipe fences a transaction only on one
	// still in flight, and a request the pipeline handed before it saw
	// the failure would otherwise go out unfenced once the failed one was
	// received, and commit records (and a position) past the batches the
	// failed one was to record.
	var failed error
	send := func(r markReq) {
		if len(sent) == 0 {
			headSince = time.Now()
		}
		if failed != nil {
			sent = append(sent, marked{marks: r.marks, records: r.records,
				err: fmt.Errorf("exporter: mark batches: not sent: %w: %w", locks.ErrEarlierFailed, failed)})
			return
		}
		// A transaction that could not be sent is reported in its turn.
		sent = append(sent, m.send(ctx, pipe, bufs, r))
	}
	for {
		if len(sent) == 0 {
			r, ok := <-reqs
			if !ok {
				return
			}
			send(r)
			continue
		}
		if len(sent) < markerDepth && reqs != nil {
			switch r, state := takeWithin(reqs, shortest()*3/4-time.Since(headSince)); state {
			case taken:
				send(r)
			case closed:
				reqs = nil
			}
		}
		head := sent[0]
		sent = sent[1:]
		if head.err == nil {
			head = m.receive(ctx, pipe, head)
		}
		if head.err != nil && failed == nil {
			failed = head.err
		}
		now := time.Now()
		recent[n%len(recent)] = now.Sub(headSince)
		n++
		headSince = now
		out <- head
		if reqs == nil && len(sent) == 0 {
			return
		}
	}
}

// markBufs are the buffers a marker's transactions build their
// arguments in, kept from one transaction to the next (issue 55: a
// drain's marker allocated a record's compression scratch and copies,
// and the digests' and the history's arrays, anew a transaction, most of
// 45 MB over 100,000 rows). The pipe has encoded a transaction's
// arguments when its Send returns, so the next one may reuse them. A nil
// *markBufs makes new ones (a look's one transaction).
type markBufs struct {
	pk      checkpoint.Packer
	digests digestBufs
	history history.Arrays
}

// reset frees the digests' and the history's arrays for a transaction.
func (m *markBufs) reset() (*digestBufs, *history.Arrays) {
	if m == nil {
		return nil, nil
	}
	m.digests.reset()
	m.history.Reset()
	return &m.digests, &m.history
}

// packer is the record's Packer.
func (m *markBufs) packer() *checkpoint.Packer {
	if m == nil {
		return new(checkpoint.Packer)
	}
	return &m.pk
}

type takeState int

const (
	timedOut takeState = iota
	taken
	closed
)

// takeWithin takes the next request from reqs if one comes within wait.
func takeWithin(reqs <-chan markReq, wait time.Duration) (markReq, takeState) {
	select {
	case r, ok := <-reqs:
		if !ok {
			return r, closed
		}
		return r, taken
	default:
	}
	if wait <= 0 {
		return markReq{}, timedOut
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case r, ok := <-reqs:
		if !ok {
			return r, closed
		}
		return r, taken
	case <-t.C:
		return markReq{}, timedOut
	}
}

// send queues one marker transaction on pipe: the outcomes of answered
// batches, the forgetting of their records, and the records of batches
// about to be sent. The statements and their callbacks are built here; the
// callbacks run in receive. Its arguments are built in bufs (nil: new
// ones), which the next send may reuse: pipe has encoded them by then.
func (m *marker) send(ctx context.Context, pipe *locks.Pipe, bufs *markBufs, r markReq) marked {
	res := marked{marks: r.marks, records: r.records}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkTimeoutDefault)
	defer cancel()
	type group struct {
		acc, rej []feed.Item
		skipped  []feed.Item
		errs     []string
		def      []delivery.Deferral
		defTen   []string // each deferred item's tenant ("" outside a lane)
		batches  int64
		seqs     []int64
		// composed are the group's batches marked with their story and
		// digests in one statement each (composed.go): their accepted
		// items are not in acc, and count in rows.
		composed []*batch
		rows     int64
	}
	byName := map[string]*group{}
	var order []string
	for _, b := range r.marks {
		g := byName[b.name]
		if g == nil {
			g = &group{}
			byName[b.name] = g
			order = append(order, b.name)
		}
		g.batches++
		if b.seq != 0 {
			g.seqs = append(g.seqs, b.seq)
		}
		g.rows += int64(len(b.out.Accepted) + len(b.unchanged))
		if m.composes(b) {
			g.composed = append(g.composed, b)
			continue
		}
		if g.acc == nil && len(b.unchanged) == 0 {
			// One batch of the name, most often: its accepted items as
			// they are, not a copy (a full cap, so an append copies).
			g.acc = b.out.Accepted[:len(b.out.Accepted):len(b.out.Accepted)]
		} else {
			g.acc = append(g.acc, b.out.Accepted...)
			g.acc = append(g.acc, b.unchanged...)
		}
		g.skipped = append(g.skipped, b.unchanged...)
		for _, r := range b.out.Rejected {
			g.rej = append(g.rej, r.Item)
			g.errs = append(g.errs, r.Error)
		}
		g.def = append(g.def, b.out.Deferred...)
		tenant := b.tenant().String()
		for range b.out.Deferred {
			g.defTen = append(g.defTen, tenant)
		}
		for _, o := range b.oversize {
			g.rej = append(g.rej, feed.Item{ID: o.ID, Version: o.Version, Meta: feed.MetaOf(new([]feed.Meta), 1, tenant, nil)})
			g.errs = append(g.errs, oversizeError(o, m.feed.Limits()))
		}
	}
	seqs := new([]int64)
	res.seqsOut = seqs
	for _, name := range order {
		if g := byName[name]; len(g.rej) > 0 {
			res.rejected = append(res.rejected, rejectedNote{name: name, n: len(g.rej), key: g.rej[0].ID, version: g.rej[0].Version, first: g.errs[0]})
		}
	}
	// Only outcomes: harmless after the lock is lost, so the session's
	// lock is not checked (locks.Pipe.SendChained), and committed without
	// waiting for the WAL's flush (lazyCommitSQL). A transaction that
	// records batches is checked and flushed: its batches are sent.
	outcomesOnly := len(r.records) == 0
	send := pipe.Send
	if outcomesOnly {
		send = pipe.SendChained
	}
	// Every batch of one pipeline's reads belongs to one checkpoint: its
	// counts go with the record's position, in one write of its row.
	recName := ""
	if len(r.records) > 0 {
		recName = r.records[0].name
	}
	var recProgress checkpoint.Progress
	var held []heldkeys.Change
	err := send(mctx, func(qb *pgx.Batch) error {
		switch generic := pipe.Prepares() && r.items() <= genericPlansItems; {
		case outcomesOnly && generic:
			qb.Queue(lazyGenericSQL)
		case outcomesOnly:
			qb.Queue(lazyCommitSQL)
		case generic:
			qb.Queue(genericPlansSQL)
		}
		digests, arrays := bufs.reset()
		for _, name := range order {
			// A batch all accepted is marked with its story and digests
			// in one statement (composed.go).
			for _, b := range byName[name].composed {
				if err := m.queueComposed(qb, b, digests, arrays); err != nil {
					return err
				}
			}
		}
		for _, b := range r.marks {
			if !m.composes(b) {
				m.bodies.queueDigests(qb, b, digests)
				m.story.queue(qb, b, arrays)
			}
		}
		for _, name := range order {
			g := byName[name]
			if len(g.composed) == 0 || len(g.acc)+len(g.rej) > 0 {
				if err := m.feed.QueueMarks(qb, g.acc, g.rej, g.errs); err != nil {
					return err
				}
			}
			acc := g.acc
			if len(g.composed) > 0 && len(m.held.Of(name)) > 0 {
				// The holds of the composed batches' keys end too.
				acc = append(acc[:len(acc):len(acc)], composedItems(g.composed)...)
			}
			m.bodies.queueSkipped(qb, g.skipped)
			// Deferred items are held, in the transaction that marks
			// their neighbours and forgets their batch's record: the
			// batch is settled, never resent whole (heldkeys).
			ch, err := m.queueHolds(qb, name, g.def, g.defTen, acc, g.rej)
			if err != nil {
				return err
			}
			held = append(held, ch)
			checkpoint.QueueForget(qb, g.seqs)
			progress := checkpoint.Progress{Rows: g.rows, Failed: int64(len(g.rej)), Batches: g.batches}
			if name == recName {
				recProgress = progress
				continue
			}
			checkpoint.QueueAdvance(qb, name, progress)
		}
		if len(r.records) == 0 {
			return nil
		}
		recs := make([]checkpoint.Batch, len(r.records))
		for i, b := range r.records {
			recs[i] = b.record()
		}
		bufs.packer().QueueRecord(qb, recName, r.records[len(r.records)-1].position, recs, seqs, recProgress)
		return nil
	})
	if err != nil {
		res.err = fmt.Errorf("exporter: mark batches: %w", err)
	}
	res.held = held
	return res
}

// queueHolds queues on qb what the marking of feed name's batches does
// to its held keys (internal/exporter/heldkeys): deferred items held
// (tenants[i] is deferred[i]'s tenant), answered keys released. A replay
// holds nothing: its pass reads each row once, so its deferred rows are
// handed to the live export instead (pending again there, held there if
// they are deferred again), and the replay still delivers every row of
// its range.
func (m *marker) queueHolds(qb *pgx.Batch, name string, deferred []delivery.Deferral, tenants []string, acc, rej []feed.Item) (heldkeys.Change, error) {
	f := heldkeys.Feed{Checkpoint: name, Source: sourceOf(name), Destination: m.destName}
	if checkpoint.OwnerOf(name).Kind == checkpoint.KindReplay && len(deferred) > 0 {
		ch := m.held.Queue(qb, f, nil, acc, rej, holds.Policy{})
		l, ok := m.feed.(liveHandover)
		if !ok {
			return ch, fmt.Errorf("exporter: replay %s: its feed cannot hand deferred rows to the live export", name)
		}
		return ch, l.QueueLive(qb, deferred)
	}
	var items []holds.Deferred
	if len(deferred) > 0 {
		items = make([]holds.Deferred, len(deferred))
		for i, df := range deferred {
			items[i] = holds.Deferred{Tenant: tenants[i], Key: df.Item.ID, Version: df.Item.Version, Reason: df.Reason}
		}
	}
	return m.held.Queue(qb, f, items, acc, rej, heldkeys.PolicyOf(m.dest)), nil
}

// liveHandover is a replay's feed: rows its answer deferred are made
// pending in the live export.
type liveHandover interface {
	QueueLive(b *pgx.Batch, deferred []delivery.Deferral) error
}

// lazyCommitSQL lets a marker transaction that only writes outcomes
// commit without waiting for its WAL to reach the disk: a flush is the
// longest part of a one-row pass's transaction on a small disk. What a
// server crash can lose of it is safe to lose, as is what it writes after
// the lock was lost (another holder resends the same batches, under the
// same keys, and marks them itself). Its outcomes and the
// forgetting of their batches' records go together, so a lost one leaves
// the batches recorded, and the next holder resends them under their keys
// with their bodies, which the third party takes for retries. WAL is
// written in order, so nothing committed after it survives it either. A
// transaction that records batches still waits for the flush: a batch is
// never sent before its record is on disk.
const lazyCommitSQL = `SELECT set_config('synchronous_commit', 'off', true)`

// genericPlans makes the rest of a marker transaction run its
// statements' generic plans. Their arrays' lengths change from one pass to
// the next, so PostgreSQL estimated a custom plan cheaper than the generic
// one and planned them anew at every call: the marks' composed statement
// some 0.3 ms a pass under load (docs/benchmarks.md, "Plans made once").
// Transaction-local, so a pooler's next client does not inherit it; and
// only where the statements are prepared by name (locks.Pipe.Prepares):
// an unnamed one is planned at every call whatever the mode, and the
// generic plan would only lose the parameters' values. Only for a
// transaction of at most genericPlansItems items (a hot look's): a
// drain's plan, made for 500 keys, costs it some 0.6 µs a row, and
// its statements keep the plans made for their arrays' lengths.
const (
	genericPlansItems = 64
	genericPlans      = `set_config('plan_cache_mode', 'force_generic_plan', true)`
	genericPlansSQL   = `SELECT ` + genericPlans
	lazyGenericSQL    = lazyCommitSQL + `, ` + genericPlans
)

// receive waits for a transaction send queued and completes its report.
func (m *marker) receive(ctx context.Context, pipe *locks.Pipe, res marked) marked {
	if err := pipe.Receive(); err != nil {
		res.err = fmt.Errorf("exporter: mark batches: %w", err)
		return res
	}
	res.seqs = *res.seqsOut
	m.held.Apply(ctx, res.held)
	for _, r := range res.rejected {
		// Which source and which key: what a person searches for next
		// (syncer status, retry-failed --key). One key, the first: a
		// batch of rejections stays one line.
		source := jobs.Resources
		if o := checkpoint.OwnerOf(r.name); o.Kind == checkpoint.KindSource {
			source = o.Source
		}
		m.logger.WarnContext(ctx, "exporter: items rejected by the third party",
			slog.String("source", source), slog.String("key", thirdparty.SafeText(r.key)), slog.Int64("version", r.version),
			slog.Int("rejected", r.n), slog.String("error", r.first), slog.String("checkpoint", r.name))
	}
	return res
}
