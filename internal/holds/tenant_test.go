package holds_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/holds"
)

// Migration 028: in a lane's feed a hold is a (tenant, key)'s. The same
// key held at two tenants is two holds, each backing off on its own; a
// tenant's answer releases its own only; a feed without tenants holds
// under "" as before; retry-failed's Clear of a key clears it at every
// tenant.
func TestHoldsPerTenantAndKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewMigrated(t).Pool
	send := func(queue func(b *pgx.Batch)) {
		t.Helper()
		b := &pgx.Batch{}
		queue(b)
		require.NoError(t, pool.SendBatch(ctx, b).Close())
	}
	p := holds.Policy{Initial: time.Second, Max: time.Minute, Bound: time.Hour}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	zero := func() float64 { return 0 }
	const lane = "source:contacts/lane:1"

	acme := holds.Held(lane, []holds.Deferred{{Tenant: "acme", Key: "7", Version: 10, Reason: "429"}}, now, nil, p, zero)
	send(func(b *pgx.Batch) { holds.QueueHold(b, lane, acme) })
	globex := holds.Held(lane, []holds.Deferred{{Tenant: "globex", Key: "7", Version: 11, Reason: "503"}}, now, nil, p, zero)
	send(func(b *pgx.Batch) { holds.QueueHold(b, lane, globex) })
	untenanted := holds.Held("source:orders", []holds.Deferred{{Key: "7", Version: 3, Reason: "429"}}, now, nil, p, zero)
	send(func(b *pgx.Batch) { holds.QueueHold(b, "source:orders", untenanted) })

	got, err := holds.Load(ctx, pool, lane)
	require.NoError(t, err)
	require.Len(t, got, 2, "globex's hold of key 7 did not replace acme's")
	require.Equal(t, int64(10), got[holds.ID{Tenant: "acme", Key: "7"}].Version)
	require.Equal(t, "503", got[holds.ID{Tenant: "globex", Key: "7"}].Reason)

	// acme answered transiently again: its tries grow, globex's do not.
	again := holds.Held(lane, []holds.Deferred{{Tenant: "acme", Key: "7", Version: 10, Reason: "429"}}, now.Add(time.Second), got, p, zero)
	require.Equal(t, 2, again[0].Tries)
	send(func(b *pgx.Batch) { holds.QueueHold(b, lane, again) })
	// globex accepted at last: its hold ends, acme's stays.
	send(func(b *pgx.Batch) { holds.QueueRelease(b, lane, []holds.ID{{Tenant: "globex", Key: "7"}}) })
	got, err = holds.Load(ctx, pool, lane)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 2, got[holds.ID{Tenant: "acme", Key: "7"}].Tries)

	orders, err := holds.Load(ctx, pool, "source:orders")
	require.NoError(t, err)
	require.Contains(t, orders, holds.ID{Key: "7"})
	all, err := holds.List(ctx, pool, 10)
	require.NoError(t, err)
	require.Len(t, all, 2)

	send(func(b *pgx.Batch) { holds.QueueHold(b, lane, globex) })
	n, err := holds.Clear(ctx, pool, lane, []string{"7"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "retry-failed of a key clears it at every tenant")
}
