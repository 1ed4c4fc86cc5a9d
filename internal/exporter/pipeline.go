package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/exporter/heldkeys"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// passResult says what a pass did.
type passResult struct {
	rows    int
	batches int
	// position is the feed's position after the last batch marked.
	position int64
	// done is true when the pass reached the end of its feed.
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
	// held is what it does to the feeds' held keys, for this process to
	// know once it commits.
	held []heldkeys.Change
}

// rejectedNote is logged once the marks of rejected items commit.
type rejectedNote struct {
	name string
	n    int
	// key, version and first are the first rejected item's key, version
	// and error.
	key     string
	version int64
	first   string
}

// pipeline runs batches through record, push and mark. It is one event
// loop over three kinds of events: a batch read, a push answered, a marker
// transaction committed. Its rules:
//
//   - At most MaxInFlight pushes are unanswered at once.
//   - No batch is pushed before a committed record covers it, and every
//     batch sent and not marked stays recorded: after a crash exactly those
//     go again, under their keys, with their bodies. A lane's batch
//     answered leftRecorded (its tenant set aside, aside.go) is one: the
//     pass goes on without it.
//   - Batches are sent in the order read. A pass reads each id at most once,
//     and passes never overlap, so no id is in two unanswered requests.
//   - It holds at most MaxInFlight+readAhead batches that are not marked, so
//     memory is bounded by batches, whatever the source's size.
//   - Marker transactions write, on the lock's connection, the outcomes of
//     every batch answered since the last one was handed over, forget their
//     records, and record the batches read since. Up to two are in flight;
//     each commits only if the one before it did (see marker).
//   - A carrying pass (a poll's) ends without the transaction that would
//     write only its last outcomes: they go in the next pass's first one,
//     with its first record (see carried).
type pipeline struct {
	e  *Exporter
	lk *locks.Lock
	// feed is what the batches are read from; dest is where they go.
	feed Feed
	dest Destination
	// pusher and mark are its push and mark stages.
	pusher *pusher
	mark   *marker
	// serial pushes one batch at a time, for resends whose batches may
	// share ids.
	serial bool
	// start is the position before the first batch read.
	start int64
	// carried are batches an earlier pass of the same feed sent and left
	// unmarked: their outcomes go in this pass's first marker
	// transaction. With carry set, the batches this pass has answered
	// when it ends are left so, for the next pass (see carried).
	carried []*batch
	carry   bool
	// bodies is its unchanged stage (nil: no comparison); unsettled are
	// the ids of items sent and not marked, or held, which are never
	// skipped (unchanged.go).
	bodies    *bodies
	unsettled map[string]struct{}

	res pushedCounts
}

// pushedCounts is what a pipeline marked (or carried, answered).
type pushedCounts struct {
	rows, batches int
	position      int64
}

func (c *pushedCounts) add(b *batch) {
	c.rows += len(b.items)
	c.batches++
	c.position = max(c.position, b.position)
}

// markerDepth is how many marker transactions are in flight at most: one
// running, the next waiting behind it on the wire. More would only queue
// behind the same session.
const markerDepth = 2

// placer is a feed whose batches may take more places than its
// destination's MaxInFlight: a lane's (laneFeed.places).
type placer interface {
	places(base int) int
}

// readAhead is how many batches are read and recorded beyond those in
// flight, so a pusher that is answered finds the next batch ready.
const readAhead = 2

// run sends initial (already recorded) batches and then what rd reads, if
// rd is not nil, and returns when everything sent is marked. stop, when it
// returns true, makes the pipeline send nothing more; the batches recorded
// and never sent are forgotten.
func (p *pipeline) run(ctx context.Context, initial []*batch, rd *reader, stop func() bool) error {
	limit := max(p.dest.MaxInFlight(), 1)
	if p.serial {
		limit = 1
	}
	// A lane's places grow with the paced tenants it serves (laneFeed's
	// places): each holds a few batches waiting for its own tokens.
	base, results := limit, make(chan pushed, limit)
	pl, _ := p.feed.(placer)
	if pl != nil && !p.serial {
		results = make(chan pushed, max(LaneInFlightMax, limit))
	}
	var (
		queue      = initial // read, not yet sent; in order
		held       = len(initial) + len(p.carried)
		inflight   int
		answered   = p.carried
		inherited  = len(p.carried) // answered batches of an earlier pass, not yet handed to the marker
		markerTxs  int              // handed to the marker and not yet reported
		halt       error            // first error: nothing more is read or sent
		markFailed bool
		sentUpTo   = p.start // the position after the last batch sent
	)
	for _, b := range p.carried {
		b.inherited = true
	}
	p.carried = nil
	ctxDone := ctx.Done()
	// The marker keeps up to markerDepth transactions in flight (see
	// marker): handed ones wait in reqs, reported ones in marks, and
	// neither channel ever blocks.
	reqs := make(chan markReq, markerDepth)
	marks := make(chan marked, markerDepth)
	markerDone := make(chan struct{})
	go func() {
		defer close(markerDone)
		p.mark.run(ctx, reqs, marks)
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
	// withdraw is closed at the pass's end (its PassLength) for a lane's
	// feed: its pushes still waiting for their tenant's token then give
	// the token back and their rows are read again by the next pass,
	// which starts at once instead of after the last of them (withdraw).
	var withdraw <-chan struct{}
	if rd != nil {
		readCh = rd.ch
		defer rd.stop()
		if pl != nil && !p.serial {
			withdraw = rd.timeUp
		}
	}
	setHalt := func(err error) {
		if halt == nil {
			halt = err
		}
		readCh = nil
	}
	// An earlier pass's outcomes wait for this pass's first read, so that
	// they share a transaction with its record: one round trip and one
	// commit a look, where they took two.
	firstRead := inherited > 0 && readCh != nil
	// finished: nothing more to read or send, every push answered. A
	// carrying pass then leaves its own answered batches for the next.
	finished := func() bool {
		return halt == nil && readCh == nil && len(queue) == 0 && inflight == 0
	}
	carryOut := func() bool { return p.carry && inherited == 0 && len(answered) > 0 && finished() }

	for {
		if pl != nil && !p.serial {
			limit = pl.places(base)
		}
		if halt == nil && stop != nil && stop() {
			setHalt(errStopping)
		}
		// Start the marker when it has something to write, once the
		// events already waiting are taken in: batches read or answered
		// while the last transaction committed then share the next one.
		// Each transaction costs a round trip and a commit whatever it
		// holds, and the marker is the pipeline's serial stage.
		waiting := (readCh != nil && held < limit+readAhead && len(readCh) > 0) || len(results) > 0 ||
			(firstRead && halt == nil && held < limit+readAhead)
		if !waiting && markerTxs < markerDepth && !markFailed && !carryOut() &&
			(len(answered) > 0 || (halt == nil && hasUnrecorded(queue))) {
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
			answered, inherited = nil, 0
		}
		// Send what is recorded, in order, within the limit.
		for halt == nil && inflight < limit && len(queue) > 0 && queue[0].seq != 0 {
			b := queue[0]
			queue = queue[1:]
			inflight++
			sentUpTo = b.position
			pctx := ctx
			if withdraw != nil && !b.resent {
				pctx = delivery.WithWithdraw(ctx, withdraw)
			}
			go func() {
				out, err := p.pusher.push(pctx, b)
				results <- pushed{b: b, out: out, err: err}
			}()
		}
		// After a failed mark (the lock is lost) answered batches stay
		// unmarked and recorded: the next holder resends them.
		if inflight == 0 && markerTxs == 0 && (len(answered) == 0 || markFailed || carryOut()) && (halt != nil || (readCh == nil && len(queue) == 0)) {
			break
		}
		// Read more while the batches held stay within bounds.
		in := readCh
		if held >= limit+readAhead {
			in = nil
		}
		select {
		case f, ok := <-in:
			firstRead = false
			switch {
			case !ok:
				readCh = nil
			case f.err != nil:
				setHalt(f.err)
			case len(f.b.items) == 0:
				// Nothing to send: only its oversize and unchanged items
				// to mark.
				f.b.out = &delivery.Outcome{}
				answered = append(answered, f.b)
				held++
			default:
				queue = append(queue, f.b)
				held++
			}
		case r := <-results:
			inflight--
			if lr := (*leftRecorded)(nil); errors.As(r.err, &lr) {
				// Its tenant is set aside (aside.go): the batch stays
				// recorded, neither marked nor forgotten, and the pass
				// goes on with the other tenants.
				held--
				continue
			}
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
				held--
				if !b.inherited {
					p.res.add(b)
				}
			}
		case <-ctxDone:
			// Pushes end by themselves with the context; keep waiting
			// for them so their answers are marked.
			ctxDone = nil
			setHalt(ctx.Err())
		}
	}
	stopMarker()
	if carryOut() {
		// Sent, answered and still recorded: the next pass writes their
		// outcomes, or the job's end does (flushCarried). Counted here,
		// as marked batches are.
		for _, b := range answered {
			p.res.add(b)
		}
		p.carried = answered
	}
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
			if err := p.mark.forgetUnsent(ctx, queue[len(queue)-1].name, unsent, sentUpTo); err != nil && halt == nil {
				halt = err
			}
		}
	}
	return halt
}

// forgetUnsent forgets the records seqs of checkpoint name, never sent,
// and moves its position back to position, the last batch sent: they are
// read again (and keyed the same if nothing changed) rather than resent.
// It runs even after ctx is cancelled, as a stop's last write.
func (m *marker) forgetUnsent(ctx context.Context, name string, seqs []int64, position int64) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MarkTimeoutDefault)
	defer cancel()
	err := m.lk.WithTx(fctx, func(tx pgx.Tx) error {
		if err := checkpoint.Forget(fctx, tx, seqs); err != nil {
			return err
		}
		return checkpoint.SetPosition(fctx, tx, name, position)
	})
	if err != nil {
		return fmt.Errorf("exporter: forget unsent batches: %w", err)
	}
	return nil
}

func hasUnrecorded(queue []*batch) bool {
	for _, b := range queue {
		if b.seq == 0 && !b.recording {
			return true
		}
	}
	return false
}

// pusher is the push stage of a pipeline: it delivers a batch to its
// destination and counts it.
type pusher struct {
	dest Destination
	// metrics are the destination's; all label a source's batches
	// (source "" for a target whose items no source counts).
	metrics          *metrics.Destination
	all              *metrics.Metrics
	source, destName string
	// story writes a waiting batch's requests; lastKeys keeps the key
	// pushed last under lk, for the run's summary line.
	story    *story
	lastKeys *lastKeys
	lk       *locks.Lock
	logger   *slog.Logger
}

// push delivers one batch and records metrics.
func (s *pusher) push(ctx context.Context, b *batch) (*delivery.Outcome, error) {
	start := time.Now()
	out, err := s.dest.Deliver(ctx, delivery.Batch{Key: b.key, Salt: b.salt, Items: b.items, Body: b.body,
		Source: sourceOf(b.name), Time: b.at, Resent: b.resent})
	if err != nil {
		s.metrics.BatchFailed(time.Since(start))
		s.story.writeWaited(ctx, b, err)
		return nil, fmt.Errorf("exporter: push batch %s: %w", b.key, err)
	}
	if out.Withdrawn {
		// Nothing of it went (a lane's pass ended while it waited for
		// its token): no batch pushed, and not the run's last key.
		return out, nil
	}
	s.metrics.Batch(len(out.Accepted), len(out.Rejected), time.Since(start))
	if s.source != "" {
		s.all.SourceBatch(s.source, s.destName, len(out.Accepted), len(out.Rejected))
	}
	s.lastKeys.pushed(s.lk, b.key)
	s.logger.DebugContext(ctx, "exporter: batch pushed", slog.String("idempotency_key", b.key),
		slog.Int("items", len(b.items)), slog.Int("accepted", len(out.Accepted)),
		slog.Int("rejected", len(out.Rejected)), slog.Int("requests", out.Requests),
		slog.Duration("took", time.Since(start)))
	return out, nil
}

// target is a feed and its destination: what one pipeline runs.
type target struct {
	feed Feed
	dest Destination
	// destName and source label metrics: the destination's name, and the
	// source's (empty for a target whose items no source counts).
	destName, source string
	// bodies compares its bodies with those last accepted; nil: none.
	bodies *bodies
	// goOn, when not nil, is asked as a pass of a lane's feed reaches its
	// time: true lets it go on (lanePassLongest), since nothing waits for
	// its end (lanepass.go).
	goOn func(context.Context) bool
}

// pipeline builds the stages of a pipeline of t under lk.
func (t target) pipeline(e *Exporter, lk *locks.Lock) *pipeline {
	var st *story
	if !e.cfg.NoHistory {
		st = &story{q: e.pool, logger: e.logger, dest: t.destName, lim: t.feed.Limits()}
	}
	return &pipeline{e: e, lk: lk, feed: t.feed, dest: t.dest, bodies: t.bodies,
		pusher: &pusher{dest: t.dest, metrics: e.metrics.Destination(t.destName), all: e.metrics,
			source: t.source, destName: t.destName, story: st, lastKeys: &e.lastKeys, lk: lk, logger: e.logger},
		mark: &marker{lk: lk, feed: t.feed, dest: t.dest, destName: t.destName, held: e.heldKeys,
			bodies: t.bodies, story: st, logger: e.logger},
	}
}

// leaveUnchanged is the reader's hook to the unchanged stage: it never
// fails.
func (p *pipeline) leaveUnchanged(_ context.Context, page *feed.Page) error {
	p.bodies.leave(page, p.unsettled)
	return nil
}
