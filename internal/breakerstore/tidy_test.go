package breakerstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/tenant"
)

// Issue 54 point 4: the facts of a gone tenant (nothing pending or failed,
// no person's pause, no fact written since the cut-off) are deleted, every
// key of it; a paused tenant, a busy one, one written to since, another
// destination's tenant and the destination's own facts stay.
func TestTidyTenantsDeletesGoneTenantsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	store := func(dest string, tenant tenant.Tenant) *breakerstore.Store {
		s, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.TenantNamespace(dest, tenant)})
		require.NoError(t, err)
		return s
	}
	for _, tn := range []tenant.Tenant{"gone:rate", "gone-2", "paused", "busy", "fresh"} {
		require.NoError(t, store("crm", tn).SetRate(ctx, breakerstore.Rate{Limit: 4}))
		require.NoError(t, store("crm", tn).SetConnection(ctx, breakerstore.Connection{Unconnected: true, Error: "no connection row"}))
	}
	_, err := store("crm", "paused").SetHold(ctx, breakerstore.Hold{Paused: true, By: "console"})
	require.NoError(t, err)
	require.NoError(t, store("erp", "gone-2").SetRate(ctx, breakerstore.Rate{Limit: 4}))
	own, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.DestinationNamespace("crm")})
	require.NoError(t, err)
	require.NoError(t, own.SetRate(ctx, breakerstore.Rate{Limit: 9}))
	// Every fact so far is older than the cut-off but fresh's newest.
	_, err = b.pool.Exec(ctx, `UPDATE syncer_state SET updated_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	require.NoError(t, store("crm", "fresh").SetLastError(ctx, breakerstore.LastError{Text: "500"}))

	n, err := breakerstore.TidyTenants(ctx, b.pool, "crm", time.Now().Add(-time.Hour), func(tenant string) bool { return tenant == "busy" })
	require.NoError(t, err)
	require.Equal(t, 2, n)
	facts, err := breakerstore.ReadTenants(ctx, b.pool, "crm")
	require.NoError(t, err)
	require.NotContains(t, facts, "gone:rate")
	require.NotContains(t, facts, "gone-2")
	require.Contains(t, facts, "paused")
	require.Contains(t, facts, "busy")
	require.Contains(t, facts, "fresh")
	var left int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_state WHERE key LIKE '%gone%' AND key NOT LIKE 'destination:erp/%'`).Scan(&left))
	require.Zero(t, left, "no key of a gone tenant is left")
	erp, err := breakerstore.ReadTenants(ctx, b.pool, "erp")
	require.NoError(t, err)
	require.Contains(t, erp, "gone-2", "another destination's tenant")
	st, err := own.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 9.0, st.Rate.Limit, "the destination's own facts")
}
