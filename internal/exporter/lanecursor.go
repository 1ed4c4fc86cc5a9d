package exporter

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
)

// laneCursor is one pass over a lane: tenants in turn, after the one
// served last, each giving its share of pages (batches) per turn (one,
// or what its rate spends in tenantReadAhead: laneturns.go), until every
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
	// again are the tenants of this turn whose page was full (they have
	// more), served again at the next turn if it comes within
	// tenantTurnReuse of turnAt, the last look-up of the lane's tenants.
	again  []string
	turnAt time.Time
	// credit is each tenant's pages left of its share of the turns
	// (grant, readAgain); read, the pages of a tenant read with its
	// page of this turn and not yet given (readPage).
	credit map[string]float64
	read   map[string][]sources.Page
	end    bool
	// looked is set once the pass looked its tenants up (fastestFirst).
	looked bool
	// drained is set once a tenant was read to its end this pass: a
	// change to a key behind its cursor waits for the next pass, so the
	// pass ends at its time (goesOn).
	drained bool
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

// tenantTurnReuse is how long after the lane's tenants were last looked
// up a turn may serve again the tenants of the last one that had more
// rows, without looking: a tenant whose first change comes meanwhile
// waits that much longer for its turn. Looking up, at each page, cost a
// one-tenant lane about a tenth of its drain (the tenant column row of
// syncer-lab bench: 0.82x, the look stepping over the index entries of
// the changes marked since the last vacuum).
const tenantTurnReuse = 100 * time.Millisecond

// enqueue queues the tenants of ts ready to be read, and leaves the others
// out of the pass or waiting.
func (c *laneCursor) enqueue(ctx context.Context, now time.Time, ts []string) {
	// A turn's pages read ahead are its own: what a tenant was not
	// given in the last turn is read again (c.after is its last page
	// given), not sent stale.
	c.read = nil
	for _, t := range ts {
		ok, wait := c.f.ready(ctx, t)
		if !ok {
			delete(c.credit, t) // no turns banked while it waits
		}
		switch {
		case ok:
			c.grant(t)
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
}

// fastestFirst orders the pass's first turn by rate, fastest first. A
// pass starts with every tenant's requests spent (the last one's were
// sent or withdrawn at its end), and each waits for its place in the
// first turn: a tenant at 10/s loses five times the requests a tenant at
// 2/s does in that wait, and one at 2/s has its interval to spare. The
// turns after keep the order the look-up gave (after the tenant served
// last), each tenant its share.
//
// The first turn is the lane's tenants with rows, up to
// tenantsFirstTurn, not tenantsTurn's 16: a lane of 21 tenants looked up
// 16 after the tenant served last, and the tenant served last before the
// pass's end (a tenant at 10/s as often as not) was read only at the
// pass's third look-up, a second after the pass began under load.
func (c *laneCursor) fastestFirst() {
	rates := make(map[string]float64, len(c.queue))
	for _, t := range c.queue {
		rates[t] = c.f.pacedRate(t)
	}
	slices.SortStableFunc(c.queue, func(a, b string) int { return cmp.Compare(rates[b], rates[a]) })
}

func (c *laneCursor) Ended() bool { return c.end }

func (c *laneCursor) Next(ctx context.Context) (feed.Page, error) {
	for !c.end {
		if len(c.queue) == 0 {
			now := c.f.now()
			if len(c.again) > 0 && now.Sub(c.turnAt) < tenantTurnReuse {
				// The last turn's tenants that had more: the same turn
				// again, without asking the change log which tenants
				// have changes (its index holds the rows marked since,
				// dead until vacuumed, which that look steps over).
				ts := c.again
				c.again = nil
				c.enqueue(ctx, now, ts)
				continue
			}
			// The next turn: tenants after the one served last, less those
			// done this pass (so the pass ends once every one is).
			skip := make([]string, 0, len(c.out))
			for t, until := range c.out {
				if until.IsZero() || now.Before(until) {
					skip = append(skip, t)
				}
			}
			skip = append(skip, c.f.asideTenants()...)
			n := tenantsTurn
			if !c.looked {
				n = tenantsFirstTurn
			}
			ts, err := sources.Tenants(ctx, c.f.pool, c.f.src, c.f.lane, c.f.lastServed(), skip, n)
			if err != nil {
				return feed.Page{}, err
			}
			c.turnAt, c.again = now, nil
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
			c.enqueue(ctx, now, ts)
			if !c.looked {
				c.looked = true
				c.fastestFirst()
			}
			continue
		}
		t := c.queue[0]
		c.queue = c.queue[1:]
		if c.f.isAside(t) {
			// Set aside since its turn began: not read this pass.
			c.out[t] = time.Time{}
			continue
		}
		c.f.served(t)
		sp, err := c.readPage(ctx, t)
		if err != nil {
			return feed.Page{}, err
		}
		if len(sp.Rows) == 0 {
			c.out[t] = c.f.now().Add(tenantRecheck)
			delete(c.credit, t)
			c.drained = true
			continue
		}
		c.f.read(t)
		switch {
		case sp.End:
			c.drained = true
			c.out[t] = c.f.now().Add(tenantRecheck)
			delete(c.credit, t)
		case c.readAgain(ctx, t):
			// More of its share of this turn: after the others' pages.
			c.queue = append(c.queue, t)
		default:
			c.again = append(c.again, t)
		}
		c.after[t] = sp.Rows[len(sp.Rows)-1].Key
		p := feed.Page{Salt: tenantSalt(c.f.name, t), Tenant: t, Kept: true, Items: make([]feed.Item, 0, len(sp.Rows))}
		var metas []feed.Meta
		for _, r := range sp.Rows {
			if r.Oversize > 0 {
				p.Oversize = append(p.Oversize, feed.Oversize{ID: r.Key, Version: r.Version, Bytes: r.Oversize})
				continue
			}
			it := feed.Item{ID: r.Key, Version: r.Version, Payload: r.Payload, Deleted: r.Deleted, Meta: feed.MetaOf(&metas, len(sp.Rows), t, r.Kept)}
			it.SetCaptured(r.Captured)
			p.Items = append(p.Items, it)
		}
		return p, nil
	}
	return feed.Page{}, nil
}
