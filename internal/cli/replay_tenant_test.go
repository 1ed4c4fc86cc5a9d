package cli_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/sources"
)

// Issue 43: replay --source S --tenant T and retry-failed --source S
// --tenant T act on that tenant's rows alone.
func TestReplayAndRetryOneTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTenants(t)
	// Nothing pending: as if every change had gone.
	_, err := b.pool.Exec(ctx, `DELETE FROM syncer_changes`)
	require.NoError(t, err)

	r := run(ctx, "replay", "--source", "contacts", "--tenant", "acme", "--dry-run", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "would send 3 keys of source contacts tenant acme")
	r = run(ctx, "replay", "--source", "contacts", "--tenant", "acme", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "3 keys of source contacts tenant acme")

	// The source's job logs the replay's keys: acme's only.
	all, err := sources.Load(ctx, b.pool)
	require.NoError(t, err)
	for done := false; !done; {
		done, err = sources.Snapshot(ctx, b.pool, all[0], 100)
		require.NoError(t, err)
	}
	var tenants []string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT array_agg(DISTINCT tenant) FROM syncer_changes`).Scan(&tenants))
	require.Equal(t, []string{"acme"}, tenants)

	r = run(ctx, "replay", "--tenant", "acme", "--database-url", b.dsn)
	require.Equal(t, 2, r.code, r.stderr)

	// Failures of two tenants; retry one.
	_, err = b.pool.Exec(ctx, `DELETE FROM syncer_changes;
		INSERT INTO syncer_source_failures (source, key, version, error, tenant) VALUES
			('contacts', '4', 1, 'refused', 'globex'), ('contacts', '5', 1, 'refused', 'initech'), ('contacts', '6', 1, 'refused', 'initech')`)
	require.NoError(t, err)
	r = run(ctx, "retry-failed", "--source", "contacts", "--tenant", "initech", "--database-url", b.dsn)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "source contacts tenant initech: 2 failed keys are eligible again")
	var left []string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT array_agg(tenant) FROM syncer_source_failures`).Scan(&left))
	require.Equal(t, []string{"globex"}, left)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT array_agg(DISTINCT tenant) FROM syncer_changes`).Scan(&tenants))
	require.Equal(t, []string{"initech"}, tenants)

	r = run(ctx, "retry-failed", "--tenant", "initech", "--database-url", b.dsn)
	require.Equal(t, 2, r.code, r.stderr)
}
