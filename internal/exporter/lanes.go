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
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/tenant"
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

// knownDestinations is TenantDestinations that can give, reading nothing,
// the destination it holds for a tenant (tenants.Registry.Held); ok false:
// ask For. A lane's readiness looks use it: For reads a connected
// tenant's row right before its batch once a second (so that a revoke
// holds the next batch), and asked at the lane's look, not at the batch
// (the router asks For per batch), that read held the lane, which reads
// its tenants one after another (issue 54, docs/design.md "cause 4").
type knownDestinations interface {
	Held(tenant string) (d Destination, ok bool)
}

// Registry is a registry of tenants' destinations whose methods answer
// with its own type (tenants.Registry: *delivery.Deliverer), which Go
// does not take where TenantDestinations answers with a Destination.
type Registry[D Destination] interface {
	For(ctx context.Context, tenant string) (D, error)
	Held(tenant string) (d D, ok bool)
}

// TenantsOf is r as a source's TenantDestinations (Source.Tenants), its
// held destinations too (knownDestinations). Here, beside the interfaces
// it meets, rather than a type of the daemon's: a lane asking a tenant's
// destination calls r from the exporter, not up through the package that
// only wired them together (issue 56).
func TenantsOf[D Destination](r Registry[D]) TenantDestinations {
	return registryTenants[D]{r}
}

type registryTenants[D Destination] struct{ r Registry[D] }

var _ knownDestinations = registryTenants[*delivery.Deliverer]{}

func (t registryTenants[D]) For(ctx context.Context, tenant string) (Destination, error) {
	d, err := t.r.For(ctx, tenant)
	if err != nil {
		return nil, err // never a nil D in a non-nil interface
	}
	return d, nil
}

func (t registryTenants[D]) Held(tenant string) (Destination, bool) {
	d, ok := t.r.Held(tenant)
	if !ok {
		return nil, false // never a nil D in a non-nil interface
	}
	return d, true
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
	// pushed and unanswered at once, over all its tenants, at the least;
	// each tenant's own destination keeps its own bound (MaxInFlight)
	// below that. A tenant at its rate limit holds a few (batches
	// waiting for their tokens, one read ahead): the lane's places grow
	// with the paced tenants it serves (laneFeed.places), up to
	// LaneInFlightMax. 16 left a lane's tenants waiting for a place with
	// their tokens unused (docs/benchmarks.md "Tenants"); so did a fixed
	// 32 for 16 tenants at 4 requests/s in a lane (issue 54: 3.37/s).
	LaneInFlightDefault = 32
	// LaneInFlightMax bounds a lane's places, and so the batches it
	// holds read and unanswered.
	LaneInFlightMax = 256
	// TenantPushLimit bounds one batch's push to its tenant: past it, the
	// batch is left unanswered (its rows pending, sent again under the
	// same key if unchanged) and the lane goes on.
	TenantPushLimit = 15 * time.Second
	// tenantsTurn is how many tenants one read of a lane's tenants takes:
	// each then gives one batch, in turn.
	tenantsTurn = 16
	// tenantsFirstTurn is how many a pass's first read takes
	// (laneCursor.fastestFirst).
	tenantsFirstTurn = 4 * tenantsTurn
)

// tenantSalt is the salt of a lane's batches of tenant (tenant.Salt): the
// lane's checkpoint and the tenant, so two tenants' equal bodies have two
// keys, and a recorded batch says whose it is after a crash
// (tenantOfSalt).
func tenantSalt(checkpointName, t string) string {
	return tenant.Salt(checkpointName, tenant.Tenant(t))
}

func tenantOfSalt(salt string) (string, bool) {
	t, ok := tenant.OfSalt(salt)
	return string(t), ok
}

// checkpointOfSalt is the lane's checkpoint of a salt tenantSalt made for
// t.
func checkpointOfSalt(salt, t string) string {
	return tenant.CheckpointOfSalt(salt, tenant.Tenant(t))
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
	f := r.feeds[checkpointOfSalt(b.Salt, tenant)]
	if f != nil {
		f.pushed(tenant)
		defer f.sending(tenant)()
		if !f.letThrough(tenant, b.Key) {
			// Set aside (aside.go): its recorded batches go first, in
			// their order. One an earlier holder recorded may have
			// reached the account: it stays recorded. One read here and
			// never sent: nothing took it, its rows are read again.
			f.leaveBehind()
			if b.Resent {
				return nil, &leftRecorded{tenant: tenant}
			}
			return &delivery.Outcome{}, nil
		}
	}
	d, err := r.tenants.For(ctx, tenant)
	reached := b.Resent // recorded by an earlier holder: whatever For says
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
			if len(out.Deferred) > 0 && f != nil {
				f.leaveBehind() // held, read again once their time comes
			}
			return out, nil
		}
		if errors.Is(err, delivery.ErrWithdrawn) && !b.Resent {
			// Withdrawn at its pass's end before any request went:
			// nothing took it, its rows are read again by the next
			// pass, keyed anew from what they are then.
			return &delivery.Outcome{Withdrawn: true}, nil
		}
		reached = mayHaveReached(b, err)
	}
	if f != nil {
		// Not taken (For refused it, nothing reached, or it stays
		// recorded): read again by the lane's next pass.
		f.leaveBehind()
	}
	if ctx.Err() != nil {
		// The lock lost, a shutdown: the lane's own end.
		return nil, err
	}
	if !reached {
		// Nothing took it (unconnected, held, 4xx only): its rows wait,
		// read again later.
		r.logger.DebugContext(ctx, "exporter: a tenant's batch waits", slog.String("source", r.source),
			slog.String("tenant", tenant), slog.String("error", err.Error()))
		return &delivery.Outcome{}, nil
	}
	// Its only safe way out is under its key: it stays recorded and its
	// tenant is set aside (aside.go), while the lane's other tenants go
	// on. Answered empty, its record would be forgotten and its items
	// batched again under another key, and a third party that had taken
	// the first would hold them twice.
	if f == nil {
		// Not a lane's feed: the pass ends, the job resends it.
		var we *delivery.WaitError
		if !errors.As(err, &we) {
			err = &delivery.WaitError{Err: err, Wait: TenantRetryDefault}
		}
		return nil, err
	}
	f.setAside(tenant, f.now().Add(asideRetry))
	r.logger.InfoContext(ctx, "exporter: a tenant's batch may have reached its account: kept recorded, the tenant set aside",
		slog.String("source", r.source), slog.String("tenant", tenant), slog.String("idempotency_key", b.Key),
		slog.String("error", err.Error()))
	return nil, &leftRecorded{tenant: tenant, err: err}
}

// mayHaveReached reports whether batch b, whose push ended in err, may
// have been taken by its tenant's account: a batch recorded by an earlier
// holder may have; so may one whose push ended otherwise than in a wait
// (a deadline cut a request short), or one of whose requests got no
// answer or a 5xx (a proxy's, after the origin took it). A wait that sent
// nothing (a pause, an open breaker, refused credentials) or whose
// requests were all answered 4xx (a 429) left nothing there.
func mayHaveReached(b delivery.Batch, err error) bool {
	if b.Resent {
		return true
	}
	var we *delivery.WaitError
	if !errors.As(err, &we) {
		return true
	}
	for _, a := range we.Attempts {
		if a.Status == 0 || a.Status >= 500 {
			return true
		}
	}
	return false
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

// LanesWithWork returns the lanes exported here of the tenant source src
// that have work: the relay wakes those, not every lane, on src's events.
func (e *Exporter) LanesWithWork(ctx context.Context, q database.Querier, src string) ([]string, error) {
	lanes := e.lanesOf(src)
	if len(lanes) == 0 {
		return nil, nil
	}
	return lanesWithWork(ctx, q, lanes)
}

// lanesOf returns the names of the lanes of source src exported here.
func (e *Exporter) lanesOf(src string) []string {
	var lanes []string
	for n := range e.sourcesNow() {
		if s, _, ok := jobs.LaneOf(n); ok && s == src {
			lanes = append(lanes, n)
		}
	}
	return lanes
}

var (
	_ Feed        = (*laneFeed)(nil)
	_ Destination = (*tenantRouter)(nil)
)
