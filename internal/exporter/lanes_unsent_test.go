package exporter

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
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
