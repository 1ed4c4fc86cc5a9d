package exporter

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
)

// laneFeed is one lane's pending items, tenant after tenant. It lives as
// long as its source: the tenant served last carries over from pass to
// pass, so each pass starts after it and no tenant starves.
type laneFeed struct {
	pool    *pgxpool.Pool
	src     *sources.Source
	lane    int
	name    string
	lim     feed.Limits
	tenants TenantDestinations
	now     func() time.Time
	logger  *slog.Logger

	mu       sync.Mutex
	last     string               // the tenant served last
	waitTill map[string]time.Time // tenants For refused, until asked again
	// unsent holds, for each tenant, its pages read this pass and not
	// yet handed to its destination (between the read and the push lie
	// the record's transaction and the lane's queue). A paced
	// destination's Ready knows only the requests it was handed, so a
	// tenant's unsent pages count as that many requests of its rate on
	// top of its Ready (up to tenantUnsentFor: a page of unchanged items
	// is never pushed). Else a tenant at its rate limit was read page
	// after page, each then holding one of the lane's in-flight places
	// while it waited for its token, and the lane's other tenants waited
	// for a place with their tokens unused (rate_limit 5 gave 0.73x of
	// the accounts' sum, docs/benchmarks.md "Tenants").
	unsent map[string]unsentPages
	// aside are the tenants with a batch kept recorded (aside.go).
	aside map[string]*asideState
	// paced are the tenants found ready under a rate (paced) within
	// pacedFor, with the places each needs (places).
	paced map[string]pacedTenant
	// inLane counts each tenant's batches handed to its destination and
	// not yet answered (laneturns.go).
	inLane map[string]int
	// behind is set when a batch of this pass was answered with rows left
	// to be read again (lanepass.go).
	behind bool
}

// pacedTenant is a paced tenant's rate and need of the lane's places,
// as of at.
type pacedTenant struct {
	at   time.Time
	rate float64
	need int
}

// pacedFor is how long a paced tenant found ready counts in the lane's
// places.
const pacedFor = time.Second

// places is how many of the lane's batches may be pushed and unanswered
// at once: base (LaneInFlightDefault), or what the paced tenants it
// serves need, up to LaneInFlightMax. A tenant at its rate limit has its
// next batch handed to its deliverer up to tenantReadAhead before its
// token (so that the record's transaction never spaces its requests), and
// that batch waits in a place: a lane with more such tenants than places
// for them left tenants waiting with their tokens unused (issue 54: 16
// tenants at 4 requests/s in a lane of 32 places, 3.37 to 3.91/s).
func (f *laneFeed) places(base int) int {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	need := 0
	for t, p := range f.paced {
		if now.Sub(p.at) > pacedFor {
			delete(f.paced, t)
			continue
		}
		need += p.need
	}
	return min(max(base, need), LaneInFlightMax)
}

// notePaced notes tenant ready under rate requests/s: it needs a place
// for each batch waiting for its token within tenantReadAhead, one for
// the request being sent and one for its next page.
func (f *laneFeed) notePaced(tenant string, rate float64, now time.Time) {
	need := pacedNeed(rate)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paced == nil {
		f.paced = map[string]pacedTenant{}
	}
	f.paced[tenant] = pacedTenant{at: now, rate: rate, need: need}
}

func (f *laneFeed) Checkpoint() string  { return f.name }
func (f *laneFeed) Limits() feed.Limits { return f.lim }

func (f *laneFeed) Open(int64) Cursor {
	// Passes never overlap: every page of the last pass was pushed or
	// dropped with it.
	f.mu.Lock()
	f.unsent, f.behind = nil, false
	f.mu.Unlock()
	return &laneCursor{f: f, after: map[string]string{}, out: map[string]time.Time{}}
}

// ready reports whether tenant may be read this pass: its destination
// answers For and would send within tenantReadAhead. When it would not,
// wait is how long until it should be asked again, when its destination
// says so (0 otherwise).
func (f *laneFeed) ready(ctx context.Context, tenant string) (ok bool, wait time.Duration) {
	if f.isAside(tenant) {
		// Its recorded batches go first (resends), then its reads.
		return false, 0
	}
	return f.destReady(ctx, tenant)
}

// destReady is ready, whether tenant is set aside or not.
func (f *laneFeed) destReady(ctx context.Context, tenant string) (ok bool, wait time.Duration) {
	now := f.now()
	f.mu.Lock()
	until, waiting := f.waitTill[tenant]
	unsent := f.unsent[tenant]
	f.mu.Unlock()
	if waiting && now.Before(until) {
		return false, 0
	}
	d, err := f.destination(ctx, tenant)
	if err != nil {
		f.mu.Lock()
		if f.waitTill == nil {
			f.waitTill = map[string]time.Time{}
		}
		// Forget the tenants whose wait is over, so the map holds only
		// those waiting.
		for t, u := range f.waitTill {
			if !now.Before(u) {
				delete(f.waitTill, t)
			}
		}
		f.waitTill[tenant] = now.Add(TenantRetryDefault)
		f.mu.Unlock()
		f.logger.DebugContext(ctx, "exporter: tenant not ready", slog.String("source", f.src.Name),
			slog.String("tenant", tenant), slog.String("error", err.Error()))
		return false, 0
	}
	// ahead is how long the tenant's pages read and not yet handed over
	// will take of its rate: its Ready does not know them yet.
	var ahead time.Duration
	if p, ok := d.(paced); ok && p.Paced() {
		rate := 0.0
		if r, ok := d.(rated); ok {
			rate = r.Rate()
			f.notePaced(tenant, rate, now)
		}
		// Its batches in the lane fill the places counted for it: its
		// requests wait in its deliverer, where its Ready may not see
		// them (waiting for an in-flight slot).
		if full, wait := f.placesFull(tenant, rate, unsent, now); full {
			return false, wait
		}
		if left := tenantUnsentFor - now.Sub(unsent.at); unsent.n > 0 && left > 0 {
			if rate <= 0 {
				return false, min(left, tenantUnsentWait)
			}
			// Counted at its rate, not as a hold until handed over: a
			// tenant at 10 requests/s was read once per record's
			// transaction, 6 to 7 pages a second under load (issue 54).
			ahead = time.Duration(float64(unsent.n) / rate * float64(time.Second))
		}
	}
	if r, ok := d.(readier); ok {
		if wait, _ := r.Ready(now); wait+ahead > tenantReadAhead {
			// Asked again as its wait comes within tenantReadAhead, not
			// as its token is due: asked then, its page was read, recorded
			// and handed over after the token, and every request of a
			// tenant at its limit came that much late (issue 54: 4
			// requests/s configured gave 3.4 to 3.6 under load).
			return false, wait + ahead - tenantReadAhead
		}
	}
	return true, 0
}

// destination is tenant's destination for a look at its readiness: the
// one held (knownDestinations), else For's answer.
func (f *laneFeed) destination(ctx context.Context, tenant string) (Destination, error) {
	if h, ok := f.tenants.(knownDestinations); ok {
		if d, ok := h.Held(tenant); ok {
			return d, nil
		}
	}
	return f.tenants.For(ctx, tenant)
}

// tenantReadAhead is the wait of a tenant's destination under which its
// next page is read anyway: the page then waits for its token in the
// deliverer (a lane's request slot, that long at most) instead of being
// read only once the token is there, which spaced a tenant at its limit
// by the limit's interval plus the time from a read to its send: 5
// requests/s configured gave 3 (docs/benchmarks.md, "Tenants"). Above two
// intervals of 5 requests/s: under load the record's transaction between
// a read and its push takes more than one interval.
const tenantReadAhead = 450 * time.Millisecond

const (
	// tenantUnsentWait is how long a paced tenant with a page read and
	// not yet pushed waits in the pass before it is asked again: about a
	// record's transaction.
	tenantUnsentWait = 5 * time.Millisecond
	// tenantUnsentFor is the longest a paced tenant's unsent page holds
	// its next read.
	tenantUnsentFor = 500 * time.Millisecond
)

// paced is a destination that says whether a rate applies to its
// requests now (delivery.Deliverer.Paced): its Ready then moves with each
// request handed to it.
type paced interface{ Paced() bool }

// rated is a destination that says the rate its requests go at now
// (delivery.Deliverer.Rate).
type rated interface{ Rate() float64 }

var (
	_ paced = (*delivery.Deliverer)(nil)
	_ rated = (*delivery.Deliverer)(nil)
)

// read notes a page of tenant read; pushed, one handed to its
// destination.
func (f *laneFeed) read(tenant string) {
	now := f.now()
	f.mu.Lock()
	if f.unsent == nil {
		f.unsent = map[string]unsentPages{}
	}
	u := f.unsent[tenant]
	if now.Sub(u.at) >= tenantUnsentFor {
		u.n = 0 // pages never pushed (unchanged items) count no longer
	}
	f.unsent[tenant] = unsentPages{n: u.n + 1, at: now}
	f.mu.Unlock()
}

func (f *laneFeed) pushed(tenant string) {
	f.mu.Lock()
	if u := f.unsent[tenant]; u.n > 1 {
		f.unsent[tenant] = unsentPages{n: u.n - 1, at: u.at}
	} else {
		delete(f.unsent, tenant)
	}
	f.mu.Unlock()
}

// unsentPages are a tenant's pages read and not yet handed to its
// destination: how many, and when the last was read.
type unsentPages struct {
	n  int
	at time.Time
}

func (f *laneFeed) served(tenant string) {
	f.mu.Lock()
	f.last = tenant
	f.mu.Unlock()
}

func (f *laneFeed) lastServed() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// QueueMarks writes each tenant's outcomes on its own changes.
func (f *laneFeed) QueueMarks(b *pgx.Batch, accepted, rejected []feed.Item, errs []string) error {
	type marks struct {
		acc, rej []feed.Item
		errs     []string
	}
	by := map[string]*marks{}
	var order []string
	get := func(t string) *marks {
		m := by[t]
		if m == nil {
			m = &marks{}
			by[t] = m
			order = append(order, t)
		}
		return m
	}
	for _, it := range accepted {
		m := get(it.Tenant())
		m.acc = append(m.acc, it)
	}
	for i, it := range rejected {
		m := get(it.Tenant())
		m.rej, m.errs = append(m.rej, it), append(m.errs, errs[i])
	}
	for _, t := range order {
		m := by[t]
		keys, versions := wire(m.acc)
		rkeys, rversions := wire(m.rej)
		if err := sources.QueueMarks(b, f.src, sources.Scope{Tenant: t}, keys, versions, rkeys, rversions, m.errs); err != nil {
			return err
		}
	}
	return nil
}
