package exporter

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/sources"
)

// pacedDest is a tenant's destination whose token is always there.
type pacedDest struct{ paced bool }

func (pacedDest) Deliver(context.Context, delivery.Batch) (*delivery.Outcome, error) {
	return &delivery.Outcome{}, nil
}
func (pacedDest) MaxInFlight() int                       { return 4 }
func (pacedDest) Ready(time.Time) (time.Duration, error) { return 0, nil }
func (d pacedDest) Paced() bool                          { return d.paced }

type oneDest struct{ d Destination }

func (o oneDest) For(context.Context, string) (Destination, error) { return o.d, nil }

// A paced tenant with a page read and not yet pushed is not read again
// until the page is pushed or tenantUnsentFor has passed; an unpaced one
// is.
func TestTenantUnsentPageHoldsPacedRead(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	feed := func(paced bool) *laneFeed {
		return &laneFeed{src: &sources.Source{Name: "contacts"}, tenants: oneDest{pacedDest{paced: paced}},
			now: func() time.Time { return now }, logger: slog.New(slog.DiscardHandler)}
	}
	f := feed(true)
	ok, _ := f.ready(ctx, "acme")
	require.True(t, ok)

	f.read("acme")
	ok, wait := f.ready(ctx, "acme")
	require.False(t, ok, "a paced tenant's page is unsent")
	require.Equal(t, tenantUnsentWait, wait)
	ok, _ = f.ready(ctx, "globex")
	require.True(t, ok, "another tenant is not held")

	// The lane's batch reaching the router is the page pushed.
	f.name = "syncer_source:contacts$lane3"
	router := &tenantRouter{tenants: f.tenants, logger: f.logger, source: "contacts", feeds: map[string]*laneFeed{f.name: f}}
	_, err := router.Deliver(ctx, delivery.Batch{Salt: tenantSalt(f.name, "acme")})
	require.NoError(t, err)
	ok, _ = f.ready(ctx, "acme")
	require.True(t, ok, "pushed")

	f.read("acme")
	now = now.Add(tenantUnsentFor)
	ok, _ = f.ready(ctx, "acme")
	require.True(t, ok, "a page never pushed (unchanged items) holds at most tenantUnsentFor")

	f.read("acme")
	f.Open(0)
	ok, _ = f.ready(ctx, "acme")
	require.True(t, ok, "a new pass forgets the last one's pages")

	u := feed(false)
	u.read("acme")
	ok, _ = u.ready(ctx, "acme")
	require.True(t, ok, "an unpaced tenant reads ahead")
}

// ratedDest is a paced destination at rate requests/s whose next token
// is wait away.
type ratedDest struct {
	pacedDest
	rate float64
	wait time.Duration
}

func (d ratedDest) Rate() float64                          { return d.rate }
func (d ratedDest) Ready(time.Time) (time.Duration, error) { return d.wait, nil }

// Issue 54: a paced tenant's unsent pages count at its rate, so a
// tenant at 10 requests/s is read again while a page or two wait for
// the record's transaction, up to tenantReadAhead of its requests; it is
// asked again as that comes within tenantReadAhead; and the lane's
// places grow with what its paced tenants need.
func TestTenantUnsentPagesCountAtItsRate(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	f := &laneFeed{src: &sources.Source{Name: "contacts"}, tenants: oneDest{ratedDest{pacedDest: pacedDest{paced: true}, rate: 10}},
		now: func() time.Time { return now }, logger: slog.New(slog.DiscardHandler)}
	for range 5 {
		ok, _ := f.ready(ctx, "acme")
		require.True(t, ok, "up to 450 ms of its requests read ahead")
		f.read("acme")
	}
	ok, wait := f.ready(ctx, "acme")
	require.False(t, ok)
	require.Equal(t, 50*time.Millisecond, wait, "asked again as its 5th page comes within the read-ahead")
	require.Equal(t, LaneInFlightDefault, f.places(LaneInFlightDefault), "one tenant needs fewer than the least")

	slow := &laneFeed{src: &sources.Source{Name: "contacts"}, tenants: oneDest{ratedDest{pacedDest: pacedDest{paced: true}, rate: 4, wait: time.Second}},
		now: func() time.Time { return now }, logger: slog.New(slog.DiscardHandler)}
	for i := range 40 {
		ok, wait := slow.ready(ctx, string(rune('a'+i%26))+string(rune('a'+i/26)))
		require.False(t, ok)
		require.Equal(t, time.Second-tenantReadAhead, wait, "asked again once its token is within the read-ahead, not once it is due")
	}
	require.Equal(t, 40*(2+2), slow.places(LaneInFlightDefault), "40 tenants at 4/s: 4 places each")
}

// Issue 54: a lane's turn gives a paced tenant the pages its rate spends
// in the read-ahead (4.5 at 10/s: 4, then 5 with the half carried), one
// at 2/s, one to an unpaced tenant; a tenant not ready banks nothing; a
// paced tenant whose batches in the lane fill its places is not read.
func TestTenantTurnShareFollowsItsRate(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	dests := map[string]Destination{
		"fast":    ratedDest{pacedDest: pacedDest{paced: true}, rate: 10},
		"slow":    ratedDest{pacedDest: pacedDest{paced: true}, rate: 2},
		"unpaced": pacedDest{},
		"later":   ratedDest{pacedDest: pacedDest{paced: true}, rate: 10, wait: time.Second},
	}
	f := &laneFeed{src: &sources.Source{Name: "contacts"}, tenants: byTenant(dests),
		now: func() time.Time { return now }, logger: slog.New(slog.DiscardHandler)}
	c := &laneCursor{f: f, after: map[string]string{}, out: map[string]time.Time{}}
	// turn reads tenant's pages as Next does: the page read, then again
	// while readAgain says so; each page pushed and answered at once.
	turn := func(tenant string) int {
		ok, _ := f.ready(ctx, tenant)
		require.True(t, ok, tenant)
		c.grant(tenant)
		n := 1
		for {
			f.read(tenant)
			f.pushed(tenant)
			if !c.readAgain(ctx, tenant) {
				return n
			}
			n++
		}
	}
	require.Equal(t, 4, turn("fast"), "4.5 pages at 10/s")
	require.Equal(t, 5, turn("fast"), "the half page carried")
	require.Equal(t, 1, turn("slow"))
	require.Equal(t, 1, turn("slow"))
	require.Equal(t, 1, turn("unpaced"))

	// Not ready (its token a second away): it banks no credit.
	c.credit["later"] = 3
	c.enqueue(ctx, now, []string{"later"})
	require.NotContains(t, c.credit, "later")

	// Its batches in the lane (pushed, unanswered) fill its places.
	var answer []func()
	for range pacedNeed(10) {
		answer = append(answer, f.sending("fast"))
	}
	ok, wait := f.ready(ctx, "fast")
	require.False(t, ok, "7 batches of a 10/s tenant unanswered")
	require.Equal(t, 100*time.Millisecond, wait)
	ok, _ = f.ready(ctx, "slow")
	require.True(t, ok, "another tenant's places are its own")
	answer[0]()
	ok, _ = f.ready(ctx, "fast")
	require.True(t, ok, "one answered")
}

// byTenant gives each tenant its destination.
type byTenant map[string]Destination

func (b byTenant) For(_ context.Context, tenant string) (Destination, error) {
	if d, ok := b[tenant]; ok {
		return d, nil
	}
	return nil, errors.New("unconnected")
}

// A paced tenant's pages of a turn read in one statement are cut as one
// read of a page each would have cut them.
func TestSplitPagesCutsAsOneReadEach(t *testing.T) {
	row := func(key string, size int) sources.Row {
		return sources.Row{Key: key, Payload: make([]byte, size)}
	}
	lim := feed.Limits{Items: 2, Bytes: 10, MaxItemBytes: 100}
	sp := sources.Page{Rows: []sources.Row{row("1", 1), row("2", 1), row("3", 12), row("4", 5), row("5", 6), row("6", 0)}, End: true}
	var got [][]string
	var ends []bool
	for _, p := range splitPages(sp, lim) {
		var keys []string
		for _, r := range p.Rows {
			keys = append(keys, r.Key)
		}
		got, ends = append(got, keys), append(ends, p.End)
	}
	require.Equal(t, [][]string{{"1", "2"}, {"3"}, {"4"}, {"5", "6"}}, got, "2 rows a page; 10 bytes, a larger row alone")
	require.Equal(t, []bool{false, false, false, true}, ends)
}

// Issue 54: a pass's first turn reads its paced tenants fastest first
// (every tenant's requests are spent at a pass's start, and one at 10/s
// loses five times what one at 2/s does while it waits for its place);
// an unpaced tenant comes last, the others keep their order.
func TestFirstTurnFastestFirst(t *testing.T) {
	t.Parallel()
	now := time.Now()
	f := &laneFeed{now: func() time.Time { return now }}
	f.notePaced("slow", 2, now)
	f.notePaced("fast", 10, now)
	f.notePaced("mid", 5, now)
	f.notePaced("slow2", 2, now)
	c := &laneCursor{f: f, queue: []string{"slow", "unpaced", "fast", "slow2", "mid"}}
	c.fastestFirst()
	require.Equal(t, []string{"fast", "mid", "slow", "slow2", "unpaced"}, c.queue)
}
