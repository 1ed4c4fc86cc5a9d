package daemon_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

func thirdpartyURL(u string) thirdparty.Config { return thirdparty.Config{URL: u} }

func TestGaugesCountWhatIsNotSynced(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE resources SET synced_at = now() WHERE id <= 6`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE resources SET failed_at = now(), sync_error = 'no' WHERE id = 7`)
	require.NoError(t, err)

	d, err := daemon.New(ctx, b.pool, &daemon.Config{ThirdParty: thirdpartyURL(b.fakeURL)})
	require.NoError(t, err)
	require.NoError(t, d.RefreshGauges(ctx))
	m := d.Metrics()
	res := []string{jobs.Resources, metrics.DefaultDestination}
	require.InDelta(t, 3.0, testutil.ToFloat64(m.SourcePending.WithLabelValues(res...)), 0, "3 pending")
	require.InDelta(t, 1.0, testutil.ToFloat64(m.SourceFailed.WithLabelValues(res...)), 0, "1 failed")
	require.Positive(t, testutil.ToFloat64(m.SourceOldestPending.WithLabelValues(res...)))
	require.Zero(t, testutil.ToFloat64(m.SourceStopped.WithLabelValues(res...)))

	// The deprecated names say the same, for one release.
	require.InDelta(t, 4.0, testutil.ToFloat64(m.UnsyncedRows), 0, "3 pending and 1 failed")
	require.InDelta(t, 1.0, testutil.ToFloat64(m.FailedRows), 0)
	require.InDelta(t, testutil.ToFloat64(m.SourceOldestPending.WithLabelValues(res...)), testutil.ToFloat64(m.OldestUnsyncedAge), 0)
}
