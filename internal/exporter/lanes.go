package exporter

// Lanes: a source with a tenant column (docs/protocol.md section 10) is
// exported as its lanes. A tenant hashes to one lane (sources.Lane); each
// lane is a source of the family of its own (jobs.LaneName: its job, its
// export lock with its lease, its checkpoint, its wake-ups), so every
// running daemon takes lanes and a daemon that dies or freezes loses them
// within the lease, as it loses any source. Inside a lane, tenants take
// turns (laneCursor) and each batch goes to its tenant's own destination
// (tenantRouter).

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/sources"
)

// TenantDestinations gives each tenant of a source with a tenant column
// its own destination: its own rate limit, learned limit, breaker,
// requests in flight, refusal and pause (contract section 10).
type TenantDestinations interface {
	// For returns tenant's destination. An error means the tenant's rows
	// wait (pending, never failed): unconnected (no connection row),
	// its credentials unreadable... The pipeline skips the tenant and asks
	// again later (at most every few seconds); err's text is the tenant's
	// state error (it never holds a secret).
	For(ctx context.Context, tenant string) (Destination, error)
}

// readier is a destination that says, without sending, how long until it
// would send (delivery.Deliverer.Ready).
type readier interface {
	Ready(now time.Time) (time.Duration, error)
}

var _ readier = (*delivery.Deliverer)(nil)

const (
	// TenantRetryDefault is how long a tenant whose destination For
	// refused (unconnected, unreadable credentials) is left out before
	// For is asked again.
	TenantRetryDefault = 3 * time.Second
	// LaneInFlightDefault is how many batches a lane's pipeline has
	// pushed and unanswered at once, over all its tenants; each tenant's
	// own destination keeps its own bound (MaxInFlight) below that. A
	// tenant at its rate limit holds up to three (two batches waiting for
	// their tokens, one read ahead), so 32 keeps ten such tenants of a
	// lane sending at their limits; 16 left a lane's tenants waiting for
	// a place with their tokens unused (docs/benchmarks.md "Tenants").
	LaneInFlightDefault = 32
	// TenantPushLimit bounds one batch's push to its tenant: past it, the
	// batch is left unanswered (its rows pending, sent again under the
	// same key if unchanged) and the lane goes on.
	TenantPushLimit = 15 * time.Second
	// tenantsTurn is how many tenants one read of a lane's tenants takes:
	// each then gives one batch, in turn.
	tenantsTurn = 16
)

// tenantSalt is the salt of a lane's batches of tenant: the lane's
// checkpoint and the tenant, so two tenants' equal bodies have two keys,
// and a recorded batch says whose it is after a crash (tenantOfSalt).
func tenantSalt(checkpointName, tenant string) string {
	return checkpointName + tenantSaltSep + tenant
}

// tenantSaltSep cannot occur in a checkpoint's name (source names hold
// letters, digits and _ - . $ only).
const tenantSaltSep = "/tenant="

func tenantOfSalt(salt string) (string, bool) {
	_, t, ok := strings.Cut(salt, tenantSaltSep)
	return t, ok
}

// laneSources returns the lanes of s, a configured source with a tenant
// column, as sources of the family.
func (e *Exporter) laneSources(s Source, src *sources.Source) ([]exported, error) {
	tenants := s.Tenants
	if tenants == nil {
		tenants = oneAccount{s.Destination}
	}
	out := make([]exported, 0, src.Lanes)
	router := &tenantRouter{tenants: tenants, logger: e.logger, source: src.Name, feeds: map[string]*laneFeed{}}
	for lane := range max(src.Lanes, 1) {
		ls := s
		ls.name = jobs.LaneName(s.name, lane)
		f := &laneFeed{pool: e.pool, src: src, lane: lane, name: checkpoint.Source(ls.name), lim: e.limits(s.BatchSize),
			tenants: tenants, now: e.now, logger: e.logger}
		router.feeds[f.name] = f
		out = append(out, &laneSource{Source: ls, src: src, lane: lane, e: e, feed: f, dest: router})
	}
	return out, nil
}

// oneAccount sends every tenant to one destination, sharing its state: a
// source's Tenants when the daemon gives none.
type oneAccount struct{ d Destination }

func (o oneAccount) For(context.Context, string) (Destination, error) { return o.d, nil }

// laneSource is one lane of a source with a tenant column. Lane 0 also
// does the source's side work (its snapshot, its replays' chunks).
type laneSource struct {
	Source
	src  *sources.Source
	lane int
	e    *Exporter
	feed *laneFeed
	dest *tenantRouter
}

func (s *laneSource) base() *Source { return &s.Source }

func (s *laneSource) check(ctx context.Context) error { return sources.Check(ctx, s.e.pool, s.src) }

// live: the unchanged-body skip's digests are kept per tenant and key
// (internal/unchanged), so a row moved to another tenant is sent there;
// under the source's name, not the lane's, so that a replay, a heal or a
// reinstall of the source forgets them, whatever lane a tenant is in.
func (s *laneSource) live() target {
	var b *bodies
	if s.BodyTag != "" {
		b = &bodies{feed: s.src.Name, tag: s.BodyTag, skip: true}
	}
	return target{feed: s.feed, dest: s.dest, destName: s.DestinationName, source: s.src.Name, bodies: b}
}

func (s *laneSource) owns(name string) bool { return name == checkpoint.Source(s.Name()) }

func (s *laneSource) ended(ctx context.Context, e *Exporter, err error) {
	cs := configuredSource{Source: s.Source, src: s.src, e: e}
	cs.name = s.src.Name
	if s.lane != 0 && err == nil {
		return // lane 0 clears the source's error
	}
	cs.ended(ctx, e, err)
}

func (s *laneSource) drain(e *Exporter, r *run) (func(context.Context) (int, error), func(context.Context, bool) (int, error)) {
	drain, poll := e.drainSource(r, s.src, s.Name(), s.live(), s.lane == 0)
	if s.lane != 0 {
		return drain, poll
	}
	// Lane 0 first gives the changes logged without a tenant (a key
	// resent by verify) their row's tenant, so its lane sends them.
	return func(ctx context.Context) (int, error) {
		if n, err := sources.AdoptUntenanted(ctx, e.pool, s.src); err != nil {
			return 0, err
		} else if n > 0 {
			e.logger.InfoContext(ctx, "exporter: changes logged without a tenant given their row's", slog.String("source", s.src.Name), slog.Int64("changes", n))
		}
		return drain(ctx)
	}, poll
}

// tenantRouter is a lane's destination: each batch goes to its tenant's.
// A tenant's own trouble (unconnected, refused, paused, its breaker open,
// a give-up) leaves the batch unanswered, its rows pending, and never
// stops the lane: the other tenants' batches go on.
type tenantRouter struct {
	tenants TenantDestinations
	logger  *slog.Logger
	source  string
	// feeds are the lanes' feeds by checkpoint (the salt's first part),
	// told when a batch they read reaches its tenant's destination.
	feeds map[string]*laneFeed
}

func (r *tenantRouter) MaxInFlight() int { return LaneInFlightDefault }

func (r *tenantRouter) Deliver(ctx context.Context, b delivery.Batch) (*delivery.Outcome, error) {
	tenant, ok := tenantOfSalt(b.Salt)
	if !ok {
		return nil, fmt.Errorf("exporter: source %s: a batch without a tenant (salt %q)", r.source, b.Salt)
	}
	if f := r.feeds[strings.TrimSuffix(b.Salt, tenantSaltSep+tenant)]; f != nil {
		f.pushed(tenant)
	}
	d, err := r.tenants.For(ctx, tenant)
	if err == nil {
		// Bounded: a pass ends only once every push is answered, so one
		// tenant's account that keeps failing (retried inside Deliver
		// until its breaker opens or it gives up) would hold the lane's
		// other tenants from the next pass.
		tctx, cancel := context.WithTimeout(ctx, TenantPushLimit)
		var out *delivery.Outcome
		out, err = d.Deliver(tctx, b)
		cancel()
		if err == nil {
			return out, nil
		}
	}
	if ctx.Err() != nil {
		// The lock lost, a shutdown: the lane's own end.
		return nil, err
	}
	r.logger.DebugContext(ctx, "exporter: a tenant's batch waits", slog.String("source", r.source),
		slog.String("tenant", tenant), slog.String("error", err.Error()))
	return &delivery.Outcome{}, nil
}

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
	// unsent holds, for each tenant, when its page read this pass and
	// not yet handed to its destination was read (between the read and
	// the push lie the record's transaction and the lane's queue). A
	// paced destination's Ready knows only the requests it was handed,
	// so while its tenant's page is unsent the tenant is not read again
	// (up to tenantUnsentFor: a page of unchanged items is never
	// pushed). Else a tenant at its rate limit was read page after page,
	// each then holding one of the lane's in-flight places while it
	// waited for its token, and the lane's other tenants waited for a
	// place with their tokens unused (rate_limit 5 gave 0.73x of the
	// accounts' sum, docs/benchmarks.md "Tenants").
	unsent map[string]time.Time
}

func (f *laneFeed) Checkpoint() string  { return f.name }
func (f *laneFeed) Limits() feed.Limits { return f.lim }

func (f *laneFeed) Open(int64) Cursor {
	// Passes never overlap: every page of the last pass was pushed or
	// dropped with it.
	f.mu.Lock()
	f.unsent = nil
	f.mu.Unlock()
	return &laneCursor{f: f, after: map[string]string{}, out: map[string]time.Time{}}
}

// ready reports whether tenant may be read this pass: its destination
// answers For and would send now. When it would not, wait is how long
// until it would, when its destination says so (0 otherwise).
func (f *laneFeed) ready(ctx context.Context, tenant string) (ok bool, wait time.Duration) {
	now := f.now()
	f.mu.Lock()
	until, waiting := f.waitTill[tenant]
	readAt, unsent := f.unsent[tenant]
	f.mu.Unlock()
	if waiting && now.Before(until) {
		return false, 0
	}
	d, err := f.tenants.For(ctx, tenant)
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
	if p, ok := d.(paced); ok && unsent && p.Paced() {
		if left := tenantUnsentFor - now.Sub(readAt); left > 0 {
			return false, min(left, tenantUnsentWait)
		}
	}
	if r, ok := d.(readier); ok {
		if wait, _ := r.Ready(now); wait > tenantReadAhead {
			return false, wait
		}
	}
	return true, 0
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

var _ paced = (*delivery.Deliverer)(nil)

// read notes a page of tenant read; pushed, one handed to its
// destination.
func (f *laneFeed) read(tenant string) {
	f.mu.Lock()
	if f.unsent == nil {
		f.unsent = map[string]time.Time{}
	}
	f.unsent[tenant] = f.now()
	f.mu.Unlock()
}

func (f *laneFeed) pushed(tenant string) {
	f.mu.Lock()
	delete(f.unsent, tenant)
	f.mu.Unlock()
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
		m := get(it.Tenant)
		m.acc = append(m.acc, it)
	}
	for i, it := range rejected {
		m := get(it.Tenant)
		m.rej, m.errs = append(m.rej, it), append(m.errs, errs[i])
	}
	for _, t := range order {
		m := by[t]
		keys, versions := wire(m.acc)
		rkeys, rversions := wire(m.rej)
		if err := sources.QueueTenantMarks(b, f.src, t, keys, versions, rkeys, rversions, m.errs); err != nil {
			return err
		}
	}
	return nil
}

// laneCursor is one pass over a lane: tenants in turn, after the one
// served last, each giving one page (one batch) per turn, until every
// tenant's keys are read or its destination is not ready.
type laneCursor struct {
	f     *laneFeed
	queue []string          // this turn's tenants still to serve
	after map[string]string // each tenant's last key read this pass
	// out are the tenants left out of the turns: until the pass ends
	// (zero time: not ready), or until the time given (read to their end:
	// a row written since is read after tenantRecheck, not at the next
	// pass, so a tenant with one new row does not wait for a pass that a
	// tenant with a backlog makes long).
	out map[string]time.Time
	// waiting are the tenants left out for their destination's short
	// wait (its rate limit's next request): until then, with rows left.
	// A turn that finds no other tenant sleeps until the first of them
	// rather than ending the pass, so a tenant at its limit sends at its
	// limit, not once a pass (the job's next poll).
	waiting map[string]time.Time
	end     bool
}

// tenantWaitInPass is the longest wait of a tenant's destination that
// keeps it in the pass; a longer one (a pause, a 429's Retry-After, an
// open breaker) leaves it out until the pass ends.
const tenantWaitInPass = time.Second

// soonest is how long until the first tenant waiting within the pass is
// ready, 0 for none; it forgets those whose wait is over.
func (c *laneCursor) soonest(now time.Time) time.Duration {
	var first time.Duration
	for t, until := range c.waiting {
		w := until.Sub(now)
		if w <= 0 {
			delete(c.waiting, t)
			continue
		}
		if first == 0 || w < first {
			first = w
		}
	}
	return first
}

// tenantRecheck is how long a tenant read to its end is left out of a
// pass's turns.
const tenantRecheck = 100 * time.Millisecond

func (c *laneCursor) Ended() bool { return c.end }

func (c *laneCursor) Next(ctx context.Context) (feed.Page, error) {
	for !c.end {
		if len(c.queue) == 0 {
			// The next turn: tenants after the one served last, less those
			// done this pass (so the pass ends once every one is).
			now := c.f.now()
			skip := make([]string, 0, len(c.out))
			for t, until := range c.out {
				if until.IsZero() || now.Before(until) {
					skip = append(skip, t)
				}
			}
			ts, err := sources.Tenants(ctx, c.f.pool, c.f.src, c.f.lane, c.f.lastServed(), skip, tenantsTurn)
			if err != nil {
				return feed.Page{}, err
			}
			if len(ts) == 0 {
				if wait := c.soonest(now); wait > 0 {
					select {
					case <-ctx.Done():
						return feed.Page{}, ctx.Err()
					case <-time.After(wait):
					}
					continue
				}
				c.end = true
				break
			}
			for _, t := range ts {
				switch ok, wait := c.f.ready(ctx, t); {
				case ok:
					c.queue = append(c.queue, t)
				case wait > 0 && wait <= tenantWaitInPass:
					c.out[t] = now.Add(wait)
					if c.waiting == nil {
						c.waiting = map[string]time.Time{}
					}
					c.waiting[t] = now.Add(wait)
				default:
					c.out[t] = time.Time{}
				}
			}
			continue
		}
		t := c.queue[0]
		c.queue = c.queue[1:]
		c.f.served(t)
		after, read := c.after[t]
		sp, err := sources.TenantPending(ctx, c.f.pool, c.f.src, c.f.lane, t, after, !read, c.f.lim)
		if err != nil {
			return feed.Page{}, err
		}
		if sp.End || len(sp.Rows) == 0 {
			c.out[t] = c.f.now().Add(tenantRecheck)
		}
		if len(sp.Rows) == 0 {
			continue
		}
		c.after[t] = sp.Rows[len(sp.Rows)-1].Key
		p := feed.Page{Salt: tenantSalt(c.f.name, t), Tenant: t, Kept: true, Items: make([]feed.Item, 0, len(sp.Rows))}
		for _, r := range sp.Rows {
			if r.Oversize > 0 {
				p.Oversize = append(p.Oversize, feed.Oversize{ID: r.Key, Version: r.Version, Bytes: r.Oversize})
				continue
			}
			p.Items = append(p.Items, feed.Item{ID: r.Key, Version: r.Version, Payload: r.Payload, Deleted: r.Deleted, Tenant: t, Kept: r.Kept})
		}
		c.f.read(t)
		return p, nil
	}
	return feed.Page{}, nil
}

// lanesWithWork returns those of names (lanes exported here) that have
// work, asking each source for its lanes at once.
func lanesWithWork(ctx context.Context, q database.Querier, names []string) ([]string, error) {
	bySource := map[string][]int{}
	var order []string
	for _, n := range names {
		src, lane, _ := jobs.LaneOf(n)
		if _, seen := bySource[src]; !seen {
			order = append(order, src)
		}
		bySource[src] = append(bySource[src], lane)
	}
	var out []string
	for _, src := range order {
		lanes, err := sources.LanesWithWork(ctx, q, src, bySource[src])
		if err != nil {
			return nil, err
		}
		for _, l := range lanes {
			out = append(out, jobs.LaneName(src, l))
		}
	}
	return out, nil
}

const (
	// LaneShareSnooze is how long a lane's job waits when the daemon that
	// fetched it holds its share of the source's lanes already: another
	// daemon's River fetches it meanwhile.
	LaneShareSnooze = time.Second
	// LaneShareWait bounds how long after its insert a lane's job is left
	// to another daemon: past it, the daemon that fetches it runs it
	// whatever it holds, so a peer that is alive but takes no job (its
	// workers busy, frozen within its presence lease) delays the lane by
	// this at most.
	LaneShareWait = 5 * time.Second
)

// overShare reports whether name is a lane's job that this daemon should
// leave to another: Config.Peers says other daemons run, this one runs
// as many lanes of the source as its share (lanes / daemons, rounded up)
// already, and the job is younger than LaneShareWait.
func (e *Exporter) overShare(ctx context.Context, name string, created time.Time) bool {
	src, _, ok := jobs.LaneOf(name)
	if !ok || e.cfg.Peers == nil || time.Since(created) > LaneShareWait {
		return false
	}
	s, ok := e.sourcesNow()[name]
	if !ok {
		return false
	}
	peers, err := e.cfg.Peers(ctx, s.base().DestinationName)
	if err != nil || peers <= 1 {
		return false
	}
	lanes, active := 0, 0
	for n := range e.sourcesNow() {
		if ls, _, ok := jobs.LaneOf(n); ok && ls == src {
			lanes++
			if e.Active(n) {
				active++
			}
		}
	}
	share := (lanes + peers - 1) / peers
	return active >= share
}

// LanesWithWork returns the lanes exported here of the tenant source src
// that have work: the relay wakes those, not every lane, on src's events.
func (e *Exporter) LanesWithWork(ctx context.Context, q database.Querier, src string) ([]string, error) {
	var lanes []string
	for n := range e.sourcesNow() {
		if s, _, ok := jobs.LaneOf(n); ok && s == src {
			lanes = append(lanes, n)
		}
	}
	if len(lanes) == 0 {
		return nil, nil
	}
	return lanesWithWork(ctx, q, lanes)
}

var (
	_ Feed        = (*laneFeed)(nil)
	_ Destination = (*tenantRouter)(nil)
)
