package exporter

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// batch is one request's worth of rows on its way through the pipeline:
// read, recorded (seq set), sent, answered (out set), marked.
type batch struct {
	name  string // the checkpoint it belongs to
	items []thirdparty.Item
	salt  string
	key   string
	body  []byte
	// at is when the batch was made, recorded with it: formats whose
	// bodies carry a time render this one, on every send.
	at time.Time
	// lastID is the last row's id (resources); a source's batches leave
	// it 0: a source pass always reads its pending keys from the first.
	lastID int64
	seq    int64 // set once a committed record covers the batch
	// recording is set while a marker transaction in flight records the
	// batch: it is not recorded twice.
	recording bool
	out       *delivery.Outcome
	// oversize are rows too large to send: recorded failed with the
	// batch's outcome, never sent.
	oversize []resources.Row
	// resent marks a batch a previous holder recorded: it may have reached
	// the third party, so it stays recorded until it is marked, even if
	// this run never sends it.
	resent bool
}

func (b *batch) record() checkpoint.Batch {
	return checkpoint.Batch{Name: b.name, Key: b.key, Salt: b.salt, Items: len(b.items), Body: b.body, Time: b.at}
}

// newBatch encodes rows as one request under the installation's key. Rows
// too large to send stay out of the request; a batch of nothing else is
// only marked.
func (e *Exporter) newBatch(name, salt string, rows []resources.Row) *batch {
	b := &batch{name: name, salt: salt, lastID: rows[len(rows)-1].ID, at: batchTime()}
	b.items = make([]thirdparty.Item, 0, len(rows))
	for _, r := range rows {
		if r.Oversize > 0 {
			b.oversize = append(b.oversize, r)
			continue
		}
		b.items = append(b.items, thirdparty.Item{ID: r.ID, Version: r.Version, Payload: r.Payload, Deleted: r.Deleted})
	}
	if len(b.items) > 0 {
		b.body = thirdparty.AppendBatch(nil, b.items)
		b.key = thirdparty.BatchKey(e.cfg.Installation, salt, b.body)
	}
	return b
}

// batchTime is a new batch's time, in whole seconds (what formats write,
// and what the record keeps exactly).
func batchTime() time.Time { return time.Now().UTC().Truncate(time.Second) }

// sourceOf names what a checkpoint's batches are rows of, for formats that
// say it: a configured source's name, or "resources".
func sourceOf(checkpointName string) string {
	if name, ok := checkpoint.SourceName(checkpointName); ok {
		return name
	}
	return delivery.SourceDefault
}

// oversizeError says why a row was never sent.
func (e *Exporter) oversizeError(r resources.Row) string {
	return fmt.Sprintf("payload of %d bytes is larger than SYNCER_MAX_ITEM_BYTES (%d): not sent; shrink the row, or raise the limit and run syncer retry-failed",
		r.Oversize, cmp.Or(e.cfg.MaxItemBytes, resources.MaxItemBytesDefault))
}

// newKeyedBatch encodes a source's pending rows as one request: each
// item's id is the key's text form.
func (e *Exporter) newKeyedBatch(name, salt string, rows []sources.Row) *batch {
	b := &batch{name: name, salt: salt, at: batchTime()}
	b.items = make([]thirdparty.Item, len(rows))
	for i, r := range rows {
		b.items[i] = thirdparty.Item{Key: r.Key, Version: r.Version, Payload: r.Payload, Deleted: r.Deleted}
	}
	b.body = thirdparty.AppendBatch(nil, b.items)
	b.key = thirdparty.BatchKey(e.cfg.Installation, salt, b.body)
	return b
}

// recordedBatch turns a recorded batch back into one to send: its exact
// body, its key, and the items the body holds (for marks and splits).
func recordedBatch(r checkpoint.Batch) (*batch, error) {
	items, err := thirdparty.DecodeBatch(r.Body)
	if err != nil {
		return nil, fmt.Errorf("exporter: recorded batch %d (%s): %w", r.Seq, r.Key, err)
	}
	b := &batch{name: r.Name, items: items, salt: r.Salt, key: r.Key, body: r.Body, seq: r.Seq, resent: true, at: r.Time.UTC()}
	if len(items) > 0 && items[len(items)-1].Key == "" {
		b.lastID = items[len(items)-1].ID
	}
	return b, nil
}

// reader reads a source's batches ahead of the pushers, in id order.
type reader struct {
	ch     chan fetched
	cancel context.CancelFunc
	done   chan struct{}
}

type fetched struct {
	b   *batch
	err error
}

// startReader reads src after startAfter until the source is exhausted,
// maxBatches were read (0: no limit) or until has passed (zero: never).
// One batch waits in the channel while the next is read; the pipeline
// bounds what it holds beyond that.
func (e *Exporter) startReader(ctx context.Context, src source, startAfter int64, maxBatches int, until time.Time) *reader {
	rctx, cancel := context.WithCancel(ctx)
	r := &reader{ch: make(chan fetched, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer close(r.ch)
		after := startAfter
		var afterKey *string // a source's position: nil before the first key
		for n := 0; maxBatches == 0 || n < maxBatches; n++ {
			if !until.IsZero() && time.Now().After(until) {
				return
			}
			var f fetched
			if src.fetchKeys != nil {
				rows, err := src.fetchKeys(rctx, afterKey)
				if err == nil && len(rows) == 0 {
					return
				}
				if err != nil {
					f.err = err
				} else {
					f.b = e.newKeyedBatch(src.checkpoint, src.salt, rows)
					last := rows[len(rows)-1].Key
					afterKey = &last
				}
			} else {
				rows, salt, err := src.fetch(rctx, after, e.limits())
				if err == nil && len(rows) == 0 {
					return
				}
				if err != nil {
					f.err = err
				} else {
					f.b = e.newBatch(src.checkpoint, salt, rows)
					after = f.b.lastID
				}
			}
			err := f.err
			select {
			case r.ch <- f:
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

// passResult says what a pass did.
type passResult struct {
	rows    int
	batches int
	lastID  int64
	// done is true when the pass reached the end of its source.
	done bool
}

// pushed is a push's answer.
type pushed struct {
	b   *batch
	out *delivery.Outcome
	err error
}

// marked is a marker transaction's report.
type marked struct {
	marks   []*batch // batches whose outcome it wrote
	records []*batch // batches it recorded
	seqs    []int64
	err     error
	// seqsOut is where the record's callback stores seqs.
	seqsOut  *[]int64
	rejected []rejectedNote
}

// rejectedNote is logged once the marks of rejected items commit.
type rejectedNote struct {
	name  string
	n     int
	first string
}

// pipeline runs batches through record, push and mark. It is one event
// loop over three kinds of events: a batch read, a push answered, a marker
// transaction committed. Its rules:
//
//   - At most MaxInFlight pushes are unanswered at once.
//   - No batch is pushed before a committed record covers it, and every
//     batch sent and not marked stays recorded: after a crash exactly those
//     go again, under their keys, with their bodies.
//   - Batches are sent in the order read. A pass reads each id at most once,
//     and passes never overlap, so no id is in two unanswered requests.
//   - It holds at most MaxInFlight+readAhead batches that are not marked, so
//     memory is bounded by batches, whatever the source's size.
//   - Marker transactions write, on the lock's connection, the outcomes of
//     every batch answered since the last one was handed over, forget their
//     records, and record the batches read since. Up to two are in flight;
//     each commits only if the one before it did (see marker).
type pipeline struct {
	e  *Exporter
	lk *locks.Lock
	// sink is where batches go and how their outcomes are written.
	sink *sink
	// serial pushes one batch at a time, for resends whose batches may
	// share ids.
	serial bool
	// start is the position before the first batch read.
	start int64

	res pushedCounts
}

// pushedCounts is what a pipeline marked.
type pushedCounts struct {
	rows, batches int
	lastID        int64
}

// markerDepth is how many marker transactions are in flight at most: one
// running, the next waiting behind it on the wire. More would only queue
// behind the same session.
const markerDepth = 2

// readAhead is how many batches are read and recorded beyond those in
// flight, so a pusher that is answered finds the next batch ready.
const readAhead = 2

// run sends initial (already recorded) batches and then what rd reads, if
// rd is not nil, and returns when everything sent is marked. stop, when it
// returns true, makes the pipeline send nothing more; the batches recorded
// and never sent are forgotten.
func (p *pipeline) run(ctx context.Context, initial []*batch, rd *reader, stop func() bool) error {
	e := p.e
	limit := e.cfg.MaxInFlight
	if p.serial {
		limit = 1
	}
	var (
		queue      = initial // read, not yet sent; in order
		held       = len(initial)
		inflight   int
		answered   []*batch
		markerTxs  int   // handed to the marker and not yet reported
		halt       error // first error: nothing more is read or sent
		markFailed bool
		sentUpTo   = p.start // the last row of the last batch sent
	)
	results := make(chan pushed, limit)
	ctxDone := ctx.Done()
	// The marker keeps up to markerDepth transactions in flight (see
	// marker): handed ones wait in reqs, reported ones in marks, and
	// neither channel ever blocks.
	reqs := make(chan markReq, markerDepth)
	marks := make(chan marked, markerDepth)
	markerDone := make(chan struct{})
	go func() {
		defer close(markerDone)
		p.marker(ctx, reqs, marks)
	}()
	stopMarker := func() {
		if reqs != nil {
			close(reqs)
			<-markerDone
			reqs = nil
		}
	}
	defer stopMarker()
	readCh := (<-chan fetched)(nil)
	if rd != nil {
		readCh = rd.ch
		defer rd.stop()
	}
	setHalt := func(err error) {
		if halt == nil {
			halt = err
		}
		readCh = nil
	}

	for {
		if halt == nil && stop != nil && stop() {
			setHalt(errStopping)
		}
		// Start the marker when it has something to write, once the
		// events already waiting are taken in: batches read or answered
		// while the last transaction committed then share the next one.
		// Each transaction costs a round trip and a commit whatever it
		// holds, and the marker is the pipeline's serial stage.
		waiting := (readCh != nil && held < limit+readAhead && len(readCh) > 0) || len(results) > 0
		if !waiting && markerTxs < markerDepth && !markFailed && (len(answered) > 0 || (halt == nil && hasUnrecorded(queue))) {
			var recs []*batch
			if halt == nil {
				for _, b := range queue {
					if b.seq == 0 && !b.recording {
						b.recording = true
						recs = append(recs, b)
					}
				}
			}
			markerTxs++
			reqs <- markReq{marks: answered, records: recs}
			answered = nil
		}
		// Send what is recorded, in order, within the limit.
		for halt == nil && inflight < limit && len(queue) > 0 && queue[0].seq != 0 {
			b := queue[0]
			queue = queue[1:]
			inflight++
			sentUpTo = b.lastID
			go func() {
				out, err := e.push(ctx, p.sink, b)
				results <- pushed{b: b, out: out, err: err}
			}()
		}
		// After a failed mark (the lock is lost) answered batches stay
		// unmarked and recorded: the next holder resends them.
		if inflight == 0 && markerTxs == 0 && (len(answered) == 0 || markFailed) && (halt != nil || (readCh == nil && len(queue) == 0)) {
			break
		}
		// Read more while the batches held stay within bounds.
		in := readCh
		if held >= limit+readAhead {
			in = nil
		}
		select {
		case f, ok := <-in:
			switch {
			case !ok:
				readCh = nil
			case f.err != nil:
				setHalt(f.err)
			case len(f.b.items) == 0:
				// Nothing to send: only its oversize rows to mark.
				f.b.out = &delivery.Outcome{}
				answered = append(answered, f.b)
				held++
			default:
				queue = append(queue, f.b)
				held++
			}
		case r := <-results:
			inflight--
			if r.err != nil {
				setHalt(r.err)
				continue
			}
			r.b.out = r.out
			answered = append(answered, r.b)
		case m := <-marks:
			markerTxs--
			for _, b := range m.records {
				b.recording = false
			}
			if m.err != nil {
				markFailed = true
				setHalt(m.err)
				continue
			}
			for i, b := range m.records {
				b.seq = m.seqs[i]
			}
			for _, b := range m.marks {
				p.res.rows += len(b.items)
				p.res.batches++
				p.res.lastID = max(p.res.lastID, b.lastID)
				held--
			}
		case <-ctxDone:
			// Pushes end by themselves with the context; keep waiting
			// for them so their answers are marked.
			ctxDone = nil
			setHalt(ctx.Err())
		}
	}
	stopMarker()
	// Batches recorded and never sent are forgotten, and the position goes
	// back to the last batch sent: they are read again (and keyed the same
	// if nothing changed) rather than resent.
	if !markFailed {
		var unsent []int64
		for _, b := range queue {
			if b.seq != 0 && !b.resent {
				unsent = append(unsent, b.seq)
			}
		}
		if len(unsent) > 0 {
			name := queue[len(queue)-1].name
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkTimeoutDefault)
			err := p.lk.WithTx(fctx, func(tx pgx.Tx) error {
				if err := checkpoint.Forget(fctx, tx, unsent); err != nil {
					return err
				}
				return checkpoint.SetPosition(fctx, tx, name, sentUpTo)
			})
			cancel()
			if err != nil && halt == nil {
				halt = fmt.Errorf("exporter: forget unsent batches: %w", err)
			}
		}
	}
	return halt
}

func hasUnrecorded(queue []*batch) bool {
	for _, b := range queue {
		if b.seq == 0 && !b.recording {
			return true
		}
	}
	return false
}

// markReq is what one marker transaction writes: the outcomes of answered
// batches, and the records of batches about to be sent.
type markReq struct {
	marks, records []*batch
}

// marker runs the pipeline's marker transactions on the lock's session, in
// the order handed, until reqs is closed, and reports each on out. It keeps
// up to two in flight (locks.Pipe): while one runs, the next is already on
// the wire, so PostgreSQL starts it the moment the first commits instead of
// idling while the answer goes out and the next transaction comes in. A
// transaction only commits if the one before it did. The marks run even
// when the job is being cancelled: what the third party accepted must be
// recorded.
func (p *pipeline) marker(ctx context.Context, reqs <-chan markReq, out chan<- marked) {
	pipe := p.lk.NewPipe()
	defer pipe.Close()
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
	send := func(r markReq) {
		if len(sent) == 0 {
			headSince = time.Now()
		}
		// A transaction that could not be sent is reported in its turn.
		sent = append(sent, p.send(ctx, pipe, r))
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
			head = p.receive(ctx, pipe, head)
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
// callbacks run in receive.
func (p *pipeline) send(ctx context.Context, pipe *locks.Pipe, r markReq) marked {
	res := marked{marks: r.marks, records: r.records}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkTimeoutDefault)
	defer cancel()
	type group struct {
		acc, rej []thirdparty.Item
		errs     []string
		batches  int64
		seqs     []int64
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
		g.acc = append(g.acc, b.out.Accepted...)
		for _, r := range b.out.Rejected {
			g.rej = append(g.rej, r.Item)
			g.errs = append(g.errs, r.Error)
		}
		for _, r := range b.oversize {
			g.rej = append(g.rej, thirdparty.Item{ID: r.ID, Version: r.Version})
			g.errs = append(g.errs, p.e.oversizeError(r))
		}
		g.batches++
		if b.seq != 0 {
			g.seqs = append(g.seqs, b.seq)
		}
	}
	seqs := new([]int64)
	res.seqsOut = seqs
	for _, name := range order {
		if g := byName[name]; len(g.rej) > 0 {
			res.rejected = append(res.rejected, rejectedNote{name: name, n: len(g.rej), first: g.errs[0]})
		}
	}
	err := pipe.Send(mctx, func(qb *pgx.Batch) error {
		for _, name := range order {
			g := byName[name]
			if err := p.sink.mark(qb, g.acc, g.rej, g.errs); err != nil {
				return err
			}
			checkpoint.QueueForget(qb, g.seqs)
			checkpoint.QueueAdvance(qb, name, checkpoint.Progress{
				Rows: int64(len(g.acc)), Failed: int64(len(g.rej)), Batches: g.batches,
			})
		}
		if len(r.records) == 0 {
			return nil
		}
		// Every batch of one pipeline's reads belongs to one checkpoint.
		recs := make([]checkpoint.Batch, len(r.records))
		for i, b := range r.records {
			recs[i] = b.record()
		}
		checkpoint.QueueRecord(qb, r.records[0].name, r.records[len(r.records)-1].lastID, recs, seqs)
		return nil
	})
	if err != nil {
		res.err = fmt.Errorf("exporter: mark batches: %w", err)
	}
	return res
}

// receive waits for a transaction send queued and completes its report.
func (p *pipeline) receive(ctx context.Context, pipe *locks.Pipe, res marked) marked {
	if err := pipe.Receive(); err != nil {
		res.err = fmt.Errorf("exporter: mark batches: %w", err)
		return res
	}
	res.seqs = *res.seqsOut
	for _, r := range res.rejected {
		p.e.logger.WarnContext(ctx, "exporter: items rejected by the third party",
			slog.String("checkpoint", r.name), slog.Int("rejected", r.n), slog.String("first_error", r.first))
	}
	return res
}

// push delivers one batch and records metrics.
func (e *Exporter) push(ctx context.Context, sk *sink, b *batch) (*delivery.Outcome, error) {
	start := time.Now()
	out, err := sk.pusher.Deliver(ctx, delivery.Batch{Key: b.key, Salt: b.salt, Items: b.items, Body: b.body,
		Source: sourceOf(b.name), Time: b.at})
	if err != nil {
		e.metrics.BatchFailed(time.Since(start))
		return nil, fmt.Errorf("exporter: push batch %s: %w", b.key, err)
	}
	e.metrics.Batch(len(out.Accepted), len(out.Rejected), time.Since(start))
	if sk.source != "" {
		e.metrics.SourceBatch(sk.source, sk.destination, len(out.Accepted), len(out.Rejected))
	}
	e.lastKey.Store(&b.key)
	e.logger.DebugContext(ctx, "exporter: batch pushed", slog.String("idempotency_key", b.key),
		slog.Int("items", len(b.items)), slog.Int("accepted", len(out.Accepted)),
		slog.Int("rejected", len(out.Rejected)), slog.Int("requests", out.Requests),
		slog.Duration("took", time.Since(start)))
	return out, nil
}

// pass pushes src's rows after startAfter until the source is exhausted,
// maxBatches were read (0: no limit), or until has passed (zero: never).
func (e *Exporter) pass(ctx context.Context, lk *locks.Lock, src source, startAfter int64, maxBatches int, until time.Time) (passResult, error) {
	p := &pipeline{e: e, lk: lk, sink: e.sinkOf(src), start: startAfter, res: pushedCounts{lastID: startAfter}}
	rd := e.startReader(ctx, src, startAfter, maxBatches, until)
	exhausted := false
	// The reader closes its channel at the end of the source, at
	// maxBatches or at until; only the first means the pass is done.
	err := p.run(ctx, nil, rd, e.isStopping)
	res := passResult{rows: p.res.rows, batches: p.res.batches, lastID: p.res.lastID}
	if err == nil {
		exhausted = (maxBatches == 0 || p.res.batches < maxBatches) && (until.IsZero() || time.Now().Before(until))
	}
	res.done = exhausted
	return res, err
}

// resume sends, one at a time and in the order they were recorded, every
// batch a previous holder of the lock recorded and did not mark, before
// anything else is read: they may have reached the third party, so they go
// again byte for byte under their keys, and a later version of any of their
// rows goes only after them. Batches of cancelled replays are dropped.
// The holder of the resources' lock resends the batches of resources (live
// and replays); a source's holder those of its own checkpoint only.
func (e *Exporter) resume(ctx context.Context, lk *locks.Lock) error {
	return e.resumeFor(ctx, lk, source{})
}

func (e *Exporter) resumeFor(ctx context.Context, lk *locks.Lock, src source) error {
	recs, err := checkpoint.Recorded(ctx, e.pool)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	var batches []*batch
	var drop []int64
	for _, r := range recs {
		if src.sink != nil && r.Name != src.checkpoint {
			continue
		}
		if src.sink == nil && isSourceCheckpoint(r.Name) {
			continue
		}
		if keep, err := e.keepRecorded(ctx, r.Name); err != nil {
			return err
		} else if !keep {
			drop = append(drop, r.Seq)
			continue
		}
		b, err := recordedBatch(r)
		if err != nil {
			return err
		}
		batches = append(batches, b)
	}
	if len(drop) > 0 {
		if err := lk.WithTx(ctx, func(tx pgx.Tx) error { return checkpoint.Forget(ctx, tx, drop) }); err != nil {
			return err
		}
	}
	if len(batches) == 0 {
		return nil
	}
	e.logger.InfoContext(ctx, "exporter: resending the batches in flight at the last stop, under their keys",
		slog.Int("batches", len(batches)), slog.String("first_idempotency_key", batches[0].key))
	p := &pipeline{e: e, lk: lk, sink: e.sinkOf(src), serial: true}
	if err := p.run(ctx, batches, nil, nil); err != nil {
		return err
	}
	return nil
}
