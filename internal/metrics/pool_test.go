package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/metrics"
)

// The pool's series show what the pool says at each scrape, not at the
// registration.
func TestPoolSeriesReadThePoolAtEachScrape(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	st := metrics.PoolStat{Max: 5, InUse: 1, Idle: 2, Acquires: 10, Waited: 1, WaitTime: 20 * time.Millisecond, Opened: 3}
	metrics.WatchPool(reg, func() metrics.PoolStat { return st })
	st.InUse, st.Acquires, st.Waited, st.WaitTime = 5, 40, 7, 1500*time.Millisecond
	want := `
# HELP syncer_db_pool_acquire_wait_seconds_total Time the acquires that found no idle connection waited, summed.
# TYPE syncer_db_pool_acquire_wait_seconds_total counter
syncer_db_pool_acquire_wait_seconds_total 1.5
# HELP syncer_db_pool_acquire_waits_total Acquires of the daemon's database pool that found no idle connection and waited for one.
# TYPE syncer_db_pool_acquire_waits_total counter
syncer_db_pool_acquire_waits_total 7
# HELP syncer_db_pool_acquires_total Connections handed out by the daemon's database pool.
# TYPE syncer_db_pool_acquires_total counter
syncer_db_pool_acquires_total 40
# HELP syncer_db_pool_connections Connections of the daemon's database pool, by state (in_use, idle).
# TYPE syncer_db_pool_connections gauge
syncer_db_pool_connections{state="idle"} 2
syncer_db_pool_connections{state="in_use"} 5
# HELP syncer_db_pool_max_connections The bound of the daemon's database pool.
# TYPE syncer_db_pool_max_connections gauge
syncer_db_pool_max_connections 5
# HELP syncer_db_pool_opened_connections_total Connections the daemon's database pool opened.
# TYPE syncer_db_pool_opened_connections_total counter
syncer_db_pool_opened_connections_total 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}
