package soak

import (
	"context"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
)

// The pooler leg's PgBouncer, in front of the test server: a PAUSE holds
// a query through it until the RESUME, a restart cuts nothing it cannot
// serve again on the same port, its transactions are counted across the
// restart, and neither counts as an exit by itself.
func TestPoolerPauseAndRestart(t *testing.T) {
	u, err := url.Parse(dbtest.URL())
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 5432
	}
	as := ""
	if os.Geteuid() == 0 {
		as = "postgres"
	}
	ctx := context.Background()
	p, err := startPooler(ctx, t.TempDir(), port, as)
	require.NoError(t, err)
	defer p.stop()

	paused := make(chan error, 1)
	go func() { paused <- p.pause(ctx, 2*time.Second) }()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	require.NoError(t, p.exec(ctx, "postgres", "SELECT 1"))
	waited := time.Since(start)
	require.NoError(t, <-paused)
	require.Greater(t, waited, time.Second, "the query waited for the RESUME")

	require.NoError(t, p.restart(ctx, 500*time.Millisecond))
	require.NoError(t, p.query(ctx, "postgres", "SELECT 1"))
	xacts, died := p.served(ctx)
	require.Zero(t, died)
	require.GreaterOrEqual(t, xacts, int64(3), "the readiness queries, the paused one's and the last, across the restart")
}
