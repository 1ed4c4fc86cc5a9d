package delivery

import (
	"context"
	"net/http"

	"github.com/syncer-dev/syncer/internal/holds"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// absentStreakMax is how many per-item 404s or 410s in a row, with no
// request accepted in between, are taken for the items' own: one more and
// the URL is refused as misconfigured, as a 404 to a batch is. A receiver
// that lost its route answers every item so; one that does not know a few
// entities accepts the others in between.
const absentStreakMax = 8

// absence is one item's own request answered 404 or 410.
type absence struct {
	item thirdparty.Item
	err  *thirdparty.Error
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
	known := len(out.Accepted) > 0
	if !known && d.urlGood.Load() {
		known = d.absentStreak.Add(int32(len(absent))) <= absentStreakMax
	}
	if !known {
		return d.refused(ctx, &d.conf, absent[0].err,
			"delivery: the third party's URL is misconfigured (a redirect, 404 or 410); nothing is sent until a probe succeeds (check "+d.cfg.URLSetting+")")
	}
	for _, a := range absent {
		out.Deferred = append(out.Deferred, Deferral{Item: a.item, Reason: thirdparty.SafeText(a.err.Error())})
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
