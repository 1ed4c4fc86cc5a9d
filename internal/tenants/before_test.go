package tenants_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
)

// A connected tenant's row is read right before its batches while the
// query runs (at most once every ReadFresh): a connection revoked holds
// the very next batch, not one 30 to 45 s later; within ReadFresh the
// read before stands, and no query runs.
func TestRevokedConnectionHoldsTheNextBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	b.exec(t, `INSERT INTO connections (account, url, token) VALUES ('acme', $1, 'tok-secret-acme')`, b.url+"/t/acme")
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tokenQuery}})
	_, err := deliver(t, r, "acme", 1)
	require.NoError(t, err)

	b.exec(t, `UPDATE connections SET revoked_at = now() WHERE account = 'acme'`)
	_, err = r.For(t.Context(), "acme")
	require.NoError(t, err, "within ReadFresh of its last read, the row read then stands")
	b.clock.Advance(tenants.ReadFresh)
	// (Asked until it holds: a read slower than ReadBeforeWait, on a
	// loaded machine, is applied behind that batch, before the next.)
	err = forUntil(t, r, "acme", func(err error) bool { return err != nil })
	require.ErrorIs(t, err, tenants.ErrUnconnected, "a batch after ReadFresh waits")
	require.Equal(t, int64(1), b.fake.TenantStats().Tenants["acme"].ItemsAccepted)

	// Connected again: the next batch after ReadFresh goes.
	b.exec(t, `UPDATE connections SET revoked_at = NULL WHERE account = 'acme'`)
	b.clock.Advance(tenants.UnconnectedEvery)
	_, err = deliver(t, r, "acme", 1)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.fake.TenantStats().Tenants["acme"].ItemsAccepted)
	b.requireNoSecret(t, "tok-secret-")
}

// Held gives the deliverer the registry holds, reading nothing: a lane's
// readiness look must not wait for the row's read before a batch (issue
// 54), which stays For's, so a revoked connection still holds the next
// batch. Without a deliverer (never read, unconnected) only For answers.
func TestHeldReadsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{Tenants: fakethirdparty.TenantConfig{TokenPrefix: "tok-secret-"}})
	b.exec(t, `INSERT INTO connections (account, url, token) VALUES ('acme', $1, 'tok-secret-acme')`, b.url+"/t/acme")
	r := b.registry(t, tenants.Config{Settings: &tenants.Settings{Query: tokenQuery}})
	_, ok := r.Held("acme")
	require.False(t, ok, "never read: For answers")
	_, err := deliver(t, r, "acme", 1)
	require.NoError(t, err)

	b.exec(t, `UPDATE connections SET revoked_at = now() WHERE account = 'acme'`)
	b.clock.Advance(tenants.ReadFresh)
	for range 3 {
		d, ok := r.Held("acme")
		require.True(t, ok, "its row a second old: held, not read")
		require.NotNil(t, d)
	}
	err = forUntil(t, r, "acme", func(err error) bool { return err != nil })
	require.ErrorIs(t, err, tenants.ErrUnconnected, "For reads the row before the batch: the revoke holds it")
	_, ok = r.Held("acme")
	require.False(t, ok, "unconnected: For answers")
	require.Equal(t, int64(1), b.fake.TenantStats().Tenants["acme"].ItemsAccepted)
}
