package breakerstore_test

import (
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// Every tenant of a destination is read in one query, each key split at
// its known suffix (a tenant's value may hold ':' and look like a key),
// and its state is named in order: paused, refused, unconnected, limited,
// ok. A connected tenant's connection fact is gone, not kept.
func TestReadTenantsAndTheirStates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	store := func(tenant tenant.Tenant) *breakerstore.Store {
		s, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("crm", tenant)})
		require.NoError(t, err)
		return s
	}
	now := time.Now()
	_, err := store("a:hold").SetHold(ctx, breakerstore.Hold{Paused: true, By: "console"})
	require.NoError(t, err)
	_, err = store("b").SetRefusal(ctx, breakerstore.KeyCredentials, breakerstore.Refusal{Refused: true, Status: 401, Message: "401 Unauthorized"})
	require.NoError(t, err)
	require.NoError(t, store("c").SetConnection(ctx, breakerstore.Connection{Unconnected: true, Error: "no connection row"}))
	require.NoError(t, store("d").SetPause(ctx, breakerstore.Pause{Until: now.Add(time.Minute), Cause: "429 Retry-After: 60"}))
	require.NoError(t, store("e").SetBreaker(ctx, breakerstore.Breaker{State: gobreaker.StateOpen, Expiry: now.Add(time.Minute)}))
	require.NoError(t, store("f").SetRate(ctx, breakerstore.Rate{Limit: 5}))
	require.NoError(t, store("g").SetConnection(ctx, breakerstore.Connection{Unconnected: true, Error: "gone"}))
	require.NoError(t, store("g").SetConnection(ctx, breakerstore.Connection{}))
	// Another destination's tenant and the destination's own facts are not
	// its tenants.
	_, err = (func() *breakerstore.Store {
		s, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace("erp", "z")})
		require.NoError(t, err)
		return s
	}()).SetHold(ctx, breakerstore.Hold{Paused: true})
	require.NoError(t, err)

	all, err := breakerstore.ReadTenants(ctx, b.pool, "crm")
	require.NoError(t, err)
	states := map[string]string{}
	for name, f := range all {
		states[name], _ = f.StateAt(now)
	}
	require.Equal(t, map[string]string{"a:hold": "paused", "b": "refused", "c": "unconnected", "d": "limited", "e": "limited", "f": "ok"}, states)
	_, text := all["c"].StateAt(now)
	require.Equal(t, "no connection row", text)

	one, err := breakerstore.ReadTenant(ctx, b.pool, "crm", "c")
	require.NoError(t, err)
	require.True(t, one.Connection.Unconnected)

	// What the gauges read (issue 54): the facts of the tenants with rows
	// and the others' holds count as every tenant's facts do.
	for _, pending := range []map[string]int64{
		{},
		{"b": 1, "c": 2, "x": 3},
		{"a:hold": 1, "d": 1, "e": 0, "f": 4, "g": 1},
		{"a": 1, "hold": 1},
	} {
		names := make([]string, 0, len(pending))
		for n := range pending {
			names = append(names, n)
		}
		some, err := breakerstore.ReadTenantsCounted(ctx, b.pool, "crm", names)
		require.NoError(t, err)
		wantCounts, wantUnconnected := breakerstore.CountTenants(all, pending, now)
		counts, unconnected := breakerstore.CountTenants(some, pending, now)
		require.Equal(t, wantCounts, counts, "pending %v", pending)
		require.Equal(t, wantUnconnected, unconnected, "pending %v", pending)
		for n := range pending {
			if all[n] != nil {
				require.Equal(t, *all[n], *some[n], "tenant %s", n)
			}
		}
	}
	idle, err := breakerstore.ReadTenantsCounted(ctx, b.pool, "crm", nil)
	require.NoError(t, err)
	require.Len(t, idle, 1, "with no tenant pending, only the holds are read")
	require.True(t, idle["a:hold"].Hold.Paused)
}
