package exporter

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/sources"
)

// heldDests holds one destination (Held, while held); For counts its
// asks (each stands for a read of the tenant's row).
type heldDests struct {
	d    Destination
	held bool
	fors atomic.Int64
}

func (h *heldDests) For(context.Context, string) (Destination, error) {
	h.fors.Add(1)
	return h.d, nil
}

func (h *heldDests) Held(string) (Destination, bool) { return h.d, h.held }

// A lane's readiness look takes the destination held, reading nothing
// (issue 54: For's read of a connected tenant's row before its batch,
// made at the lane's look, held the lane's other tenants); its batch asks
// For, so a revoked connection still holds it. Without a held one, the
// look asks For.
func TestLaneReadinessTakesTheHeldDestination(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	h := &heldDests{d: pacedDest{paced: true}, held: true}
	f := &laneFeed{name: "syncer_source:contacts$lane1", src: &sources.Source{Name: "contacts"}, tenants: h,
		now: func() time.Time { return now }, logger: slog.New(slog.DiscardHandler)}
	for range 3 {
		ok, _ := f.ready(ctx, "acme")
		require.True(t, ok)
	}
	require.Zero(t, h.fors.Load(), "the looks read nothing")

	router := &tenantRouter{tenants: f.tenants, logger: f.logger, source: "contacts", feeds: map[string]*laneFeed{f.name: f}}
	_, err := router.Deliver(ctx, delivery.Batch{Salt: tenantSalt(f.name, "acme")})
	require.NoError(t, err)
	require.Equal(t, int64(1), h.fors.Load(), "the batch asks For")

	h.held = false
	ok, _ := f.ready(ctx, "acme")
	require.True(t, ok)
	require.Equal(t, int64(2), h.fors.Load(), "none held: the look asks For")
}
