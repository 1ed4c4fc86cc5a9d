package exporter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/metrics"
)

// TestLockHeldGaugeSurvivesALostLocksRelease: a job whose export lock was
// lost (its session ended, as pg_terminate_backend or a restart does)
// releases it only after another job of the process took the lock anew;
// syncer_lock_held must still say the process holds it. The soak (seed
// 20261125) found the gauge at 0 under a holding daemon.
func TestLockHeldGaugeSurvivesALostLocksRelease(t *testing.T) {
	t.Parallel()
	m := metrics.New(prometheus.NewRegistry())
	b := setupPipeline(t, Config{Metrics: m})
	ctx := t.Context()
	require.NoError(t, b.lk.Release(ctx))
	a, err := b.e.acquire(ctx, jobs.Resources)
	require.NoError(t, err)
	require.Equal(t, 1.0, testutil.ToFloat64(m.LockHeld))

	h, held, err := locks.HolderOf(ctx, b.pool, b.e.LockKey(jobs.Resources))
	require.NoError(t, err)
	require.True(t, held)
	_, err = b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", h.PID)
	require.NoError(t, err)
	var c *locks.Lock
	require.Eventually(t, func() bool {
		c, err = b.e.acquire(ctx, jobs.Resources)
		if errors.Is(err, locks.ErrLockBusy) {
			return false
		}
		require.NoError(t, err)
		return true
	}, 10*time.Second, 20*time.Millisecond, "the second job takes the freed lock")

	res := m.SourceLockHeld.WithLabelValues(jobs.Resources, metrics.DefaultDestination)
	require.Equal(t, 1.0, testutil.ToFloat64(res))
	b.e.release(ctx, a, jobs.Resources) // the first job's deferred release, late
	require.Equal(t, 1.0, testutil.ToFloat64(res), "the process still holds the lock")
	require.Equal(t, 1.0, testutil.ToFloat64(m.LockHeld), "the deprecated name says the same")
	b.e.release(context.Background(), c, jobs.Resources)
	require.Equal(t, 0.0, testutil.ToFloat64(res))
	require.Equal(t, 0.0, testutil.ToFloat64(m.LockHeld))
}
