package delivery

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// deliver sends items as the format's requests (concurrently when there
// are several: they share the in-flight slots) and splits a request
// refused as a whole. whole, when set, is the request of the recorded
// body. pendingSince is kept for isolate's calls; items an answer leaves
// pending no longer go again within the call (they are deferred).
func (d *Deliverer) deliver(ctx context.Context, j *job, items []thirdparty.Item, whole *thirdparty.Request, pendingSince time.Time, admit bool, out *Outcome) error {
	var reqs []thirdparty.Request
	if whole != nil {
		reqs = []thirdparty.Request{*whole}
	} else {
		var err error
		if reqs, err = d.render(ctx, j, items); err != nil {
			if isProgramFailure(err) {
				return d.isolate(ctx, j, items, err, pendingSince, out)
			}
			return err
		}
	}
	if len(reqs) == 1 {
		return d.deliverRequest(ctx, j, &reqs[0], whole != nil, pendingSince, out)
	}
	// As many workers as requests may be in flight, taking the requests in
	// order; the slots bound what is in flight across batches. The items
	// of one batch have distinct ids, so their order is free.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outs := make([]Outcome, len(reqs))
	// first is the failure that stopped the others: theirs (a cancelled
	// request, or an answer read after the cancellation) follow from it.
	var mu sync.Mutex
	var first error
	var next atomic.Int64
	var wg sync.WaitGroup
	work := func() {
		// A context of the worker's own: each request's context is a child
		// of it, and children of one context shared by every worker would
		// take turns at its lock, twice a request.
		wctx, wcancel := context.WithCancel(cctx)
		defer wcancel()
		for {
			i := int(next.Add(1)) - 1
			if i >= len(reqs) || wctx.Err() != nil {
				return
			}
			if err := d.deliverRequest(wctx, j, &reqs[i], false, pendingSince, &outs[i]); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		}
	}
	workers := min(len(reqs), d.cfg.MaxInFlight)
	if d.refusing() {
		// A refused destination's next request is its probe, and the
		// others are turned away at once: were they sent alongside it,
		// the first turned away would cancel the probe, and the hold
		// would never end. One at a time, the probe goes first and the
		// rest follow only once it is accepted.
		workers = 1
	}
	var admitErr error
	if admit {
		admitErr = d.admit(cctx, workers, func() bool { return next.Load() >= int64(len(reqs)) }, &wg, work)
	} else {
		for range workers {
			wg.Go(work)
		}
	}
	wg.Wait()
	if first == nil && admitErr != nil {
		return admitErr
	}
	for i := range reqs {
		out.Accepted = append(out.Accepted, outs[i].Accepted...)
		out.Rejected = append(out.Rejected, outs[i].Rejected...)
		out.Deferred = append(out.Deferred, outs[i].Deferred...)
		out.absent = append(out.absent, outs[i].absent...)
		out.Requests += outs[i].Requests
		out.Attempts = append(out.Attempts, outs[i].Attempts...)
	}
	return first
}

// admit starts up to n workers of one batch's requests, each holding one
// of the destination's MaxInFlight worker places while it runs, and stops
// early once done says every request is taken. One batch at a time is
// admitted, in the order batches come, and it keeps the places it gets
// until its requests run out: batches then end one after another, in the
// order they were read. Were places handed round-robin, every batch in
// flight would end at about the same time, and the pipeline would have
// nothing to send while they are all marked at once and the next batches
// are read.
//
// Requests of a split or sent again (deliver from a worker) are not
// admitted: their caller holds a place already, and waiting for another
// could wait for itself.
func (d *Deliverer) admit(ctx context.Context, n int, done func() bool, wg *sync.WaitGroup, work func()) error {
	select {
	case d.admission <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-d.admission }()
	for range n {
		if done() {
			return nil
		}
		select {
		case d.places <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if done() {
			<-d.places
			return nil
		}
		wg.Go(func() {
			defer func() { <-d.places }()
			work()
		})
	}
	return nil
}

// render makes the format's requests of items, retrying a program that
// fails at run time with backoff: such a failure is no answer, and says so
// in the log and in the last error.
func (d *Deliverer) render(ctx context.Context, j *job, items []thirdparty.Item) ([]thirdparty.Request, error) {
	b := j.batch
	b.Items = items
	bo := d.newBackoff()
	for {
		reqs, err := d.format.Requests(&b)
		if err == nil || isProgramFailure(err) {
			return reqs, err
		}
		d.programFailed(ctx, err)
		next := bo.NextBackOff()
		if next == backoff.Stop {
			return nil, &WaitError{Err: fmt.Errorf("%w: %w", ErrGaveUp, err), Wait: d.cfg.GaveUpSnooze}
		}
		if err := sleep(ctx, next); err != nil {
			return nil, err
		}
	}
}

// deliverRequest sends one request until it is answered and splits it on
// a whole-request refusal. Items its answer left pending are deferred, to
// go again alone under their own backoff (the exporter holds them), and a
// per-item request answered 404 or 410 is an absence, judged by Deliver
// once every request of the batch is answered (judgeAbsent).
func (d *Deliverer) deliverRequest(ctx context.Context, j *job, r *thirdparty.Request, whole bool, pendingSince time.Time, out *Outcome) error {
	key := d.key(j, r, whole)
	res, err := d.push(ctx, key, r, out)
	if err == nil {
		apply(res, r.Items, out)
		return nil
	}
	var ae *absentError
	if errors.As(err, &ae) {
		out.absent = append(out.absent, absence{item: r.Items[0], err: ae.tpErr})
		return nil
	}
	var we *WaitError
	var tpErr *thirdparty.Error
	if errors.As(err, &we) || !errors.As(err, &tpErr) || !tpErr.BatchRefused() {
		return err
	}
	if len(r.Items) == 1 {
		out.Rejected = append(out.Rejected, Rejection{Item: r.Items[0], Error: refusalText(tpErr)})
		return nil
	}
	half := len(r.Items) / 2
	for _, part := range [][]thirdparty.Item{r.Items[:half], r.Items[half:]} {
		if err := d.deliver(ctx, j, part, nil, pendingSince, false, out); err != nil {
			return err
		}
	}
	return nil
}

// apply adds what res made of items to out: accepted, rejected, or
// deferred (left pending, with the answer's reason when it gave one).
func apply(res *thirdparty.Result, items []thirdparty.Item, out *Outcome) {
	if res == nil || (len(res.Rejected) == 0 && len(res.Pending) == 0) {
		if len(out.Accepted) == 0 {
			// The common answer, a batch's one request all accepted:
			// its items as they are, not a copy (72 bytes an item,
			// issue 55). Nothing writes to a batch's items once sent,
			// and the full cap makes an append copy.
			out.Accepted = items[:len(items):len(items)]
			return
		}
		out.Accepted = append(out.Accepted, items...)
		return
	}
	rejected := make(map[string]string, len(res.Rejected))
	for _, r := range res.Rejected {
		rejected[r.ID] = r.Error
	}
	left := make(map[string]string, len(res.Pending))
	for i, id := range res.Pending {
		why := "left pending by the third party"
		if i < len(res.PendingReasons) && res.PendingReasons[i] != "" {
			why = res.PendingReasons[i]
		}
		left[id] = why
	}
	for _, it := range items {
		id := it.ID
		if msg, ok := rejected[id]; ok {
			out.Rejected = append(out.Rejected, Rejection{Item: it, Error: cmp.Or(msg, "rejected")})
		} else if why, ok := left[id]; ok {
			out.Deferred = append(out.Deferred, Deferral{Item: it, Reason: why})
		} else {
			out.Accepted = append(out.Accepted, it)
		}
	}
}

// refusalText says why a single item was refused as a whole batch: the
// status and the third party's explanation.
func refusalText(e *thirdparty.Error) string {
	msg := e.Body
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(e.Body), &body) == nil && body.Error != "" {
		msg = thirdparty.SafeText(body.Error)
	}
	text := "refused as a whole: " + strconv.Itoa(e.StatusCode)
	if msg != "" {
		text += " " + msg
	}
	return thirdparty.SafeText(text)
}
