package exporter

// A lane's tenants set aside (contract section 10: a refused tenant holds
// alone; a tenant never waits behind another). A batch of a lane that may
// have reached its tenant's account (mayHaveReached) and got no answer
// that marks it has one safe way out: again under its Idempotency-Key,
// byte for byte. Answered empty, its items would be batched again under
// another key, and an account that took the first would hold them twice.
// So it stays recorded; but rather than end the lane's pass (every other
// tenant of the lane waiting for the job's next run, and then behind that
// one tenant's resends), its tenant is set aside in the lane's feed:
//
//   - the pipeline takes the batch's answer, leftRecorded, as neither
//     marked nor forgotten, and goes on;
//   - the tenant is not read again while it has a batch recorded: its
//     keys are still pending, and a newer version must not go before the
//     recorded one, nor its items under a new key;
//   - a batch of it read before it was set aside and not sent yet is
//     answered empty (nothing took it: its rows are read again later);
//     one recorded by an earlier holder is left recorded without a
//     request, behind the tenant's first;
//   - at each pass of the lane (a drain's or a poll's), a tenant whose
//     wait is over and whose destination is ready has its first recorded
//     batch sent again, in the pass's pipeline beside the other tenants'
//     reads; once it has none left, it is read again.
//
// Across a crash or a takeover the records still say whose they are (the
// salt names the tenant): the job's resume sets their tenants aside, due
// at once, and the first pass sends them.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/checkpoint"
)

// leftRecorded is the answer of a lane batch kept recorded: its tenant is
// set aside. An error rather than a field of delivery.Outcome: an Outcome
// is what the third party answered, and every reader of one (the marker,
// the counts, the carry) would have to learn to skip this one; as an
// error it takes the path of any push that was not answered (never
// marked, its record kept, metrics of a failed batch), and only the
// pipeline's halt tells it apart (errors.As).
type leftRecorded struct {
	tenant string
	err    error // why, nil when no request was made
}

func (e *leftRecorded) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exporter: tenant %s set aside: batch left recorded", e.tenant)
	}
	return fmt.Sprintf("exporter: tenant %s set aside: batch left recorded: %v", e.tenant, e.err)
}

func (e *leftRecorded) Unwrap() error { return e.err }

// asideState is a tenant set aside in a lane.
type asideState struct {
	// until is when its recorded batches may be tried again.
	until time.Time
	// resending is the key of its batch this pass sends again ("" none):
	// the router lets that one through.
	resending string
}

// asideRetry is how long after a failed push a tenant set aside waits
// before its recorded batch is tried again (its destination's Ready may
// say longer).
const asideRetry = TenantRetryDefault

// setAside sets tenant aside until until (zero: due at once).
func (f *laneFeed) setAside(tenant string, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.aside == nil {
		f.aside = map[string]*asideState{}
	}
	if a := f.aside[tenant]; a != nil {
		a.until, a.resending = until, ""
		return
	}
	f.aside[tenant] = &asideState{until: until}
}

// isAside reports whether tenant is set aside.
func (f *laneFeed) isAside(tenant string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.aside[tenant] != nil
}

// letThrough reports whether the batch of tenant under key may go to its
// destination: tenant is not aside, or key is its batch sent again this
// pass (once).
func (f *laneFeed) letThrough(tenant, key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.aside[tenant]
	if a == nil {
		return true
	}
	if a.resending != "" && a.resending == key {
		a.resending = ""
		return true
	}
	return false
}

// due returns the tenants set aside whose wait is over.
func (f *laneFeed) due(now time.Time) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t, a := range f.aside {
		if !now.Before(a.until) {
			out = append(out, t)
		}
	}
	return out
}

// resends returns, for each tenant set aside that is due and ready, its
// first recorded batch, to be sent again in this pass; a tenant without
// one is no longer aside. carried are batches an earlier pass answered
// and left recorded for this one to mark: they are not sent again. One
// batch a tenant a pass, so no two of a tenant's requests with its
// recorded rows are unanswered at once, and they go in the order
// recorded.
func (f *laneFeed) resends(ctx context.Context, carried []*batch) ([]*batch, error) {
	now := f.now()
	due := f.due(now)
	if len(due) == 0 {
		return nil, nil
	}
	ready := map[string]bool{}
	for _, t := range due {
		if ok, _ := f.destReady(ctx, t); ok {
			ready[t] = true
		} else {
			f.setAside(t, now.Add(asideRetry))
		}
	}
	if len(ready) == 0 {
		return nil, nil
	}
	recs, err := checkpoint.RecordedOf(ctx, f.pool, f.name)
	if err != nil {
		return nil, err
	}
	answered := map[int64]bool{}
	for _, b := range carried {
		answered[b.seq] = true
	}
	first := map[string]*batch{}
	var out []*batch
	for _, r := range recs {
		t, ok := tenantOfSalt(r.Salt)
		if !ok || !ready[t] {
			continue
		}
		if answered[r.Seq] {
			// Answered, marked with the next transaction: the tenant's
			// next batch waits for the next pass.
			first[t] = nil
			continue
		}
		if _, seen := first[t]; seen {
			continue
		}
		b, err := recordedBatch(r)
		if err != nil {
			return nil, err
		}
		first[t] = b
		out = append(out, b)
	}
	f.mu.Lock()
	for t := range ready {
		a := f.aside[t]
		switch b, ok := first[t]; {
		case a == nil:
		case !ok:
			delete(f.aside, t) // none left: read again
		case b != nil:
			a.resending = b.key
		}
	}
	f.mu.Unlock()
	if len(out) > 0 {
		f.logger.InfoContext(ctx, "exporter: sending again the recorded batches of tenants set aside, under their keys",
			slog.String("source", f.src.Name), slog.Int("batches", len(out)), slog.String("first_idempotency_key", out[0].key))
	}
	return out, nil
}

// resender is a feed with recorded batches to send again at the start of
// a pass, beside its reads (a lane's tenants set aside).
type resender interface {
	resends(ctx context.Context, carried []*batch) ([]*batch, error)
}

var _ resender = (*laneFeed)(nil)

// asideTenants returns the tenants set aside: a pass reads none of them.
func (f *laneFeed) asideTenants() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.aside))
	for t := range f.aside {
		out = append(out, t)
	}
	return out
}
