package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/syncer-dev/syncer/internal/holds"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// absentStreakMax is how many per-item 404s or 410s in a row, with no
// request accepted in between, are taken for the items' own: one more and
// the URL is refused as misconfigured, as a 404 to a batch is. A receiver
// that lost its route answers every item so; one that does not know a few
// entities accepts the others in between.
const absentStreakMax = 8

// absence is one item's own request answered 404 or 410, or failing
// transiently.
type absence struct {
	item thirdparty.Item
	err  error
}

// reason is what an absence's deferral says: the answer's status and text.
func (a absence) reason() string { return thirdparty.SafeText(a.err.Error()) }

// transientItemError is push's answer to a per-item request that failed
// transiently once: the item's or the destination's, as Deliver decides.
type transientItemError struct{ err error }

func (e *transientItemError) Error() string { return e.err.Error() }

func (e *transientItemError) Unwrap() error { return e.err }

// itemsOwn reports whether n per-item failures of a batch (absences or
// transient failures) are the items' own: another request of the batch was
// accepted, or the URL was accepted since its last refusal and fewer than
// absentStreakMax such failures came in a row with nothing accepted.
func (d *Deliverer) itemsOwn(out *Outcome, n int) bool {
	if len(out.Accepted) > 0 {
		return true
	}
	return d.urlGood.Load() && d.absentStreak.Add(int32(n)) <= absentStreakMax
}

// absentError is push's answer to a per-item request refused with 404 or
// 410: the item's or the URL's, as judgeAbsent decides.
type absentError struct{ tpErr *thirdparty.Error }

func (e *absentError) Error() string { return "delivery: item not found: " + e.tpErr.Error() }

func (e *absentError) Unwrap() error { return e.tpErr }

// itemAbsent reports whether r, refused with tpErr, is an item's own
// request answered 404 or 410.
func itemAbsent(r *thirdparty.Request, tpErr *thirdparty.Error) bool {
	return r.PerItem && len(r.Items) == 1 && tpErr != nil &&
		(tpErr.StatusCode == http.StatusNotFound || tpErr.StatusCode == http.StatusGone)
}

// judgeAbsent decides whose the batch's per-item 404s and 410s are. They
// are the items' (deferred, to go again alone) when another request of
// the batch was accepted, or when the URL was accepted since its last
// refusal and fewer than absentStreakMax such answers came in a row;
// otherwise the URL is refused as misconfigured, as today, and nothing of
// the batch is marked.
func (d *Deliverer) judgeAbsent(ctx context.Context, out *Outcome) error {
	if len(out.absent) == 0 {
		return nil
	}
	absent := out.absent
	out.absent = nil
	if !d.itemsOwn(out, len(absent)) {
		var tpErr *thirdparty.Error
		errors.As(absent[0].err, &tpErr)
		return d.refused(ctx, &d.conf, tpErr,
			"delivery: the third party's URL is misconfigured (a redirect, 404 or 410); nothing is sent until a probe succeeds (check "+d.cfg.URLSetting+")")
	}
	for _, a := range absent {
		out.Deferred = append(out.Deferred, Deferral{Item: a.item, Reason: a.reason()})
	}
	return nil
}

// settleTransient decides whose the batch's per-item transient failures
// are. The items' own (itemsOwn) are deferred, to go again alone under
// their own backoff; their neighbours are marked now. Otherwise they are
// the destination's, as a whole request's are: sent again here, under the
// same keys, with backoff, until accepted or MaxElapsed (ErrGaveUp).
func (d *Deliverer) settleTransient(ctx context.Context, j *job, out *Outcome) error {
	var bo *backoff.ExponentialBackOff
	for len(out.transient) > 0 {
		failed := out.transient
		out.transient = nil
		if d.itemsOwn(out, len(failed)) {
			for _, a := range failed {
				out.Deferred = append(out.Deferred, Deferral{Item: a.item, Reason: a.reason()})
			}
			return nil
		}
		if bo == nil {
			bo = d.newBackoff()
		}
		next := bo.NextBackOff()
		if next == backoff.Stop {
			d.logger.WarnContext(ctx, "delivery: giving up on a batch's items after transient failures",
				slog.Int("items", len(failed)), slog.Duration("max_elapsed", d.cfg.MaxElapsed), slog.String("error", failed[0].err.Error()))
			return &WaitError{Err: fmt.Errorf("%w: %w", ErrGaveUp, failed[0].err), Wait: d.cfg.GaveUpSnooze}
		}
		if err := sleep(ctx, next); err != nil {
			return err
		}
		items := make([]thirdparty.Item, len(failed))
		for i, a := range failed {
			items[i] = a.item
		}
		if err := d.deliver(ctx, j, items, nil, time.Time{}, true, out); err != nil {
			return err
		}
	}
	return nil
}

// probeAgain lets the next request probe a standing configuration
// refusal at once: a probe answered 404 for its own item says nothing of
// the URL, and the next item's request may.
func (d *Deliverer) probeAgain() {
	if !d.held.Load() {
		return
	}
	d.mu.Lock()
	if d.conf.state == refusalStanding {
		d.conf.until = d.now()
	}
	d.mu.Unlock()
}

// answered notes a 2xx answer: the URL is good, and when the answer
// accepted an item, the streak of per-item absences ends.
func (d *Deliverer) answered(acceptedAny bool) {
	if !d.urlGood.Load() {
		d.urlGood.Store(true)
	}
	if acceptedAny && d.absentStreak.Load() != 0 {
		d.absentStreak.Store(0)
	}
}

// HoldPolicy is how the caller holds a deferred item: BackoffInitial
// after its first transient answer, doubling to BackoffMax; past
// MaxElapsed since the first it holds its key (status says so), and goes
// again every BackoffMax at most.
func (d *Deliverer) HoldPolicy() holds.Policy {
	return holds.Policy{Initial: d.cfg.BackoffInitial, Max: max(d.cfg.BackoffMax, d.cfg.BackoffInitial), Bound: d.cfg.MaxElapsed}
}
