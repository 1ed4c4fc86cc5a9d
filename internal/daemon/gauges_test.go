package daemon_test

import (
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/metrics"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/status"
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

// A scrape after the drain reads what status reads: the gauges are read
// when the scrape comes, not at the last tick, which here came at the
// start, while every change was still pending.
func TestScrapedGaugesAgreeWithStatusAfterTheDrain(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	ctx := t.Context()
	_, err := b.pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, total numeric)`)
	require.NoError(t, err)
	cfg, err := config.Parse(fmt.Appendf(nil, "destinations:\n  crm:\n    url: %s\nsources:\n  - table: orders\n    key: id\n    destination: crm\n", b.fakeURL), func(string) string { return "" })
	require.NoError(t, err)
	_, err = sources.Install(ctx, b.pool, cfg.SourceSpecs())
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO orders SELECT g, g FROM generate_series(1, 10) g`)
	require.NoError(t, err)

	addr := b.start(t, &daemon.Config{HTTPAddr: "127.0.0.1:0", Sources: cfg, GaugeInterval: time.Hour})
	var report *status.Report
	require.Eventually(t, func() bool {
		report, err = status.Gather(ctx, b.pool, nil)
		require.NoError(t, err)
		return len(report.Sources) >= 1 && report.Sources[0].Name == "orders" && report.Sources[0].Pending == 0 && report.Sources[0].Snapshot == string(sources.SnapshotDone)
	}, 30*time.Second, 50*time.Millisecond, "orders drained")

	code, body := get(t, "http://"+addr+"/metrics")
	require.Equal(t, http.StatusOK, code)
	series := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `\{destination="crm",source="orders"\} (\S+)$`).FindStringSubmatch(body)
		require.NotNil(t, m, name)
		return m[1]
	}
	require.Equal(t, fmt.Sprint(report.Sources[0].Pending), series("syncer_source_pending"), "status says %d pending", report.Sources[0].Pending)
	require.Equal(t, fmt.Sprint(report.Sources[0].Failed), series("syncer_source_failed"))
}
