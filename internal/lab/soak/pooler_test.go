package soak

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
)

// The pooler leg's PgBouncer, in front of the test server: its
// transactions are counted across a restart, which does not count as an
// exit by itself.
func TestPoolerServedAcrossRestart(t *testing.T) {
	u, err := url.Parse(dbtest.URL())
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 5432
	}
	ctx := context.Background()
	p, err := startPooler(ctx, t.TempDir(), port)
	require.NoError(t, err)
	defer p.Stop()

	require.NoError(t, p.Exec(ctx, "postgres", "postgres", "SELECT 1", 5*time.Second))
	require.NoError(t, p.restart(ctx, 500*time.Millisecond))
	require.NoError(t, p.Exec(ctx, "postgres", "postgres", "SELECT 1", 5*time.Second))
	xacts, died := p.served(ctx)
	require.Zero(t, died)
	require.GreaterOrEqual(t, xacts, int64(3), "the readiness queries and the two others, across the restart")
}
