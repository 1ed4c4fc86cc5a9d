package exporter

// A lane's turns shared by rate (issue 54; docs/design.md, "A lane's
// turns, shared by rate"). A lane reads its tenants in turns: a turn is
// the tenants found ready at one look, each read in its place. One page a
// turn for every tenant gave a tenant at 10 requests/s its pages as
// rarely as one at 2/s: once the turns took longer than its interval (a
// dozen tenants a lane, a loaded machine), it sent at the pace of the
// turns, and the bench's 200 tenants at 2, 5 and 10/s read their 10/s
// tenants at a median of 0.37x of their limit while the 2/s ones kept
// theirs.
//
// So a paced tenant's share of a turn is what its rate spends in
// tenantReadAhead, in pages (turnShare), as a deficit round robin: at
// each turn its credit grows by its share; each page it is read costs
// one; while it has a credit of a page, more rows and is still ready, it
// is read again later in the same turn, after the others' pages. What is
// left under a page carries to the next turn, so the shares hold on
// average (2.25 pages a turn at 5/s is 2, 2, 2, 3). A tenant not ready
// loses its credit: it banks no turns while it waits for its tokens.
//
// Two bounds keep this within the tenant's tokens and its places:
// destReady counts the pages read and not yet pushed at its rate (so a
// turn never reads past tenantReadAhead of its requests), and a paced
// tenant whose batches in the lane (read, pushed and unanswered) reach
// what notePaced counted for it in the lane's places (pacedNeed) is not
// read until one is answered: a tenant whose requests wait in its
// deliverer for an in-flight slot (an account answering slowly), where
// its Ready does not see them, never takes the other tenants' places.
// An unpaced tenant keeps one page a turn: its deliverer's in-flight
// slots pace it, and the turns go round as fast as the lane reads.
//
// A paced tenant's pages of a turn are read in one statement
// (readPage), and so are the next tenants' of the turn, up to
// turnReadTenants: a statement costs about the same for one page as for
// five (4 ms each under load in the bench's busiest lane, 21 tenants
// asking 124 requests/s), and each statement first waits for one of the
// pool's five connections (15 ms an acquire under load), so a turn read
// a tenant at a time took 500-900 ms there, longer than a 10/s tenant's
// read-ahead, and it ran dry between its turns.

import (
	"context"
	"math"
	"time"

	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
)

// turnShare is the pages of a turn a tenant at rate requests/s gets: what
// its rate spends in tenantReadAhead, and a page at least. 0 (unpaced):
// one page.
func turnShare(rate float64) float64 {
	return max(rate*tenantReadAhead.Seconds(), 1)
}

// pacedNeed is the lane's places a tenant at rate requests/s needs: one
// for each batch waiting for its token within tenantReadAhead, one for
// the request being sent and one for its next page.
func pacedNeed(rate float64) int {
	return 2 + int(math.Ceil(rate*tenantReadAhead.Seconds()))
}

// pacedRate is the rate tenant was found paced at within pacedFor, 0
// when it was not.
func (f *laneFeed) pacedRate(tenant string) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.paced[tenant]
	if !ok || f.now().Sub(p.at) > pacedFor {
		return 0
	}
	return p.rate
}

// sending notes a batch of tenant handed to its destination (pushed), and
// returns the function that notes its answer.
func (f *laneFeed) sending(tenant string) (answered func()) {
	f.mu.Lock()
	if f.inLane == nil {
		f.inLane = map[string]int{}
	}
	f.inLane[tenant]++
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.inLane[tenant] > 1 {
			f.inLane[tenant]--
		} else {
			delete(f.inLane, tenant)
		}
		f.mu.Unlock()
	}
}

// placesFull reports, for a tenant paced at rate, whether its batches in
// the lane (unsent, read within tenantUnsentFor and not pushed; and
// pushed, unanswered) fill the places counted for it, and then how long
// until it is asked again: a request's interval, at most
// tenantPlacesRecheck.
func (f *laneFeed) placesFull(tenant string, rate float64, unsent unsentPages, now time.Time) (full bool, wait time.Duration) {
	if rate <= 0 {
		return false, 0
	}
	held := 0
	if now.Sub(unsent.at) < tenantUnsentFor {
		held = unsent.n
	}
	f.mu.Lock()
	held += f.inLane[tenant]
	f.mu.Unlock()
	if held < pacedNeed(rate) {
		return false, 0
	}
	return true, min(time.Duration(float64(time.Second)/rate), tenantPlacesRecheck)
}

// tenantPlacesRecheck is the longest a paced tenant whose batches fill its
// places waits in the pass before it is asked again.
const tenantPlacesRecheck = 100 * time.Millisecond

// grant gives tenant, found ready at a turn's start, its share of the
// turn: its credit grows by turnShare, up to a share and a page (what is
// left under a page carries over; more is not banked).
func (c *laneCursor) grant(tenant string) {
	if c.credit == nil {
		c.credit = map[string]float64{}
	}
	share := turnShare(c.f.pacedRate(tenant))
	c.credit[tenant] = min(c.credit[tenant]+share, share+1)
}

// readAgain reports whether tenant, whose page was just read and full, is
// read again in this turn: it is paced, has a page of credit left and is
// still ready (its pages read ahead within tenantReadAhead of its rate).
// Each call spends a page of its credit.
func (c *laneCursor) readAgain(ctx context.Context, tenant string) bool {
	if c.credit == nil {
		return false
	}
	c.credit[tenant]--
	if c.credit[tenant] < 1 || c.f.pacedRate(tenant) <= 0 {
		return false
	}
	ok, _ := c.f.ready(ctx, tenant)
	return ok
}

// turnReadMax bounds the pages of a tenant read in one statement.
const turnReadMax = 8

// turnReadTenants bounds the tenants of a turn read in one statement,
// and turnReadPages the pages of that statement (the memory it holds).
const (
	turnReadTenants = 16
	turnReadPages   = 32
)

// readPage reads tenant's next page: one read with an earlier page of
// this turn, or from the database, in one statement with the next
// tenants of the turn that have none (sources.TenantsPending), each its
// pages (a paced tenant with credit for more than a page has that many
// read, up to turnReadMax), the rest kept for their turns. A tenant's
// readiness was looked at as its turn began (enqueue), as when each was
// read at its place; one set aside since is still left out at its
// place (Next), its pages read and dropped.
func (c *laneCursor) readPage(ctx context.Context, tenant string) (sources.Page, error) {
	if kept := c.read[tenant]; len(kept) > 0 {
		c.read[tenant] = kept[1:]
		return kept[0], nil
	}
	reads := []sources.TenantRead{c.tenantRead(tenant)}
	pages := reads[0].Pages
	seen := map[string]bool{tenant: true}
	for _, t := range c.queue {
		if len(reads) == turnReadTenants {
			break
		}
		if seen[t] || len(c.read[t]) > 0 || c.f.isAside(t) {
			continue
		}
		seen[t] = true
		r := c.tenantRead(t)
		if pages+r.Pages > turnReadPages {
			break
		}
		pages += r.Pages
		reads = append(reads, r)
	}
	got, err := sources.TenantsPending(ctx, c.f.pool, c.f.src, c.f.lane, reads, c.f.lim)
	if err != nil {
		return sources.Page{}, err
	}
	if c.read == nil {
		c.read = map[string][]sources.Page{}
	}
	for i, r := range reads[1:] {
		// An empty page is kept too: its tenant is read to its end.
		c.read[r.Tenant] = c.pages(got[i+1], r.Pages)
	}
	ps := c.pages(got[0], reads[0].Pages)
	if len(ps) > 1 {
		c.read[tenant] = ps[1:]
	}
	return ps[0], nil
}

// tenantRead is tenant's read of this turn: after its last key given,
// its pages (its credit's, when paced).
func (c *laneCursor) tenantRead(tenant string) sources.TenantRead {
	n := 1
	if c.f.pacedRate(tenant) > 0 {
		n = min(max(int(c.credit[tenant]), 1), turnReadMax)
	}
	after, read := c.after[tenant]
	return sources.TenantRead{Tenant: tenant, After: after, First: !read, Pages: n}
}

// pages is sp, read as n pages, cut into pages.
func (c *laneCursor) pages(sp sources.Page, n int) []sources.Page {
	if n == 1 {
		return []sources.Page{sp}
	}
	return splitPages(sp, c.f.lim)
}

// splitPages cuts sp into pages within lim, as one read of lim would
// have cut its page (lim.Items rows; lim.Bytes of payload, a larger row
// alone): only the last says sp's End.
func splitPages(sp sources.Page, lim feed.Limits) []sources.Page {
	var pages []sources.Page
	start, size := 0, 0
	for i, r := range sp.Rows {
		if n := i - start; n > 0 && (n == lim.Items || size+len(r.Payload) > lim.Bytes) {
			pages = append(pages, sources.Page{Rows: sp.Rows[start:i:i]})
			start, size = i, 0
		}
		size += len(r.Payload)
	}
	return append(pages, sources.Page{Rows: sp.Rows[start:], End: sp.End})
}
