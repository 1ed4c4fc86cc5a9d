package exporter

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
)

// deliverers answers with *delivery.Deliverer, as tenants.Registry does.
type deliverers struct {
	d   *delivery.Deliverer
	err error
}

func (r deliverers) For(context.Context, string) (*delivery.Deliverer, error) { return r.d, r.err }

func (r deliverers) Held(string) (*delivery.Deliverer, bool) { return r.d, r.d != nil }

// TenantsOf hands a registry's deliverers to the lanes as it holds them,
// its held ones for the readiness looks, and never a nil deliverer inside
// a non-nil Destination: a lane tells a tenant without one by err or ok.
func TestTenantsOfRegistry(t *testing.T) {
	ctx := context.Background()
	unconnected := errors.New("unconnected")
	none := TenantsOf(deliverers{err: unconnected})
	d, err := none.For(ctx, "acme")
	require.ErrorIs(t, err, unconnected)
	require.True(t, d == nil, "a nil Destination, not a nil *Deliverer in one")
	known, ok := none.(knownDestinations)
	require.True(t, ok, "the lanes' looks take the held one")
	d, ok = known.Held("acme")
	require.False(t, ok)
	require.True(t, d == nil)

	one := &delivery.Deliverer{}
	some := TenantsOf(deliverers{d: one})
	d, err = some.For(ctx, "acme")
	require.NoError(t, err)
	require.Same(t, one, d)
	d, ok = some.(knownDestinations).Held("acme")
	require.True(t, ok)
	require.Same(t, one, d)
}
