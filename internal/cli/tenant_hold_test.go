package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// Issue 43: pause, resume and probe with --tenant act in the tenant's own
// namespace, and leave the destination's alone.
func TestPauseResumeProbeOneTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, false)
	_, err := b.pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`)
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("destinations:\n  crm:\n    url: http://127.0.0.1:1\nsources:\n  - {table: orders, key: id, destination: crm, snapshot: false}\n"), 0o600))
	r := run(ctx, "migrate", "--database-url", b.dsn, "--config", cfg, "--log-level", "error")
	require.Equal(t, 0, r.code, r.stderr)

	r = run(ctx, "pause", "--destination", "crm", "--tenant", "acme", "--database-url", b.dsn)
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
