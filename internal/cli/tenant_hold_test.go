package cli_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// Issue 43: pause, resume and probe with --tenant act in the tenant's own
// namespace, and leave the destination's alone.
// (orders has no tenant column: acme is paused ahead of its rows, --force.)
func TestPauseResumeProbeOneTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupConfigured(t, ordersDDL, ordersToCRM)

	r := run(ctx, "pause", "--destination", "crm", "--tenant", "acme", "--force", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "tenant acme of destination crm paused")
	h, err := breakerstore.ReadHold(ctx, b.pool, breakerstore.TenantNamespace("crm", "acme"))
	require.NoError(t, err)
	require.True(t, h.Paused)
	h, err = breakerstore.ReadHold(ctx, b.pool, breakerstore.DestinationNamespace("crm"))
	require.NoError(t, err)
	require.False(t, h.Paused, "the destination itself is not paused")

	r = run(ctx, "resume", "--destination", "crm", "--tenant", "acme", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	h, err = breakerstore.ReadHold(ctx, b.pool, breakerstore.TenantNamespace("crm", "acme"))
	require.NoError(t, err)
	require.False(t, h.Paused)

	r = run(ctx, "probe", "--destination", "crm", "--tenant", "acme", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "tenant acme of destination crm: nothing to probe")

	r = run(ctx, "pause", "--destination", "nope", "--tenant", "acme", "--database-url", b.dsn)
	require.Equal(t, 2, r.code, r.stderr)
}
