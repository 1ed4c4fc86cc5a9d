package daemon_test

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/migrations"
)

// A job the relay inserts starts at once, not at River's next poll (issue
// 58): with River's poll at a minute, a daemon's first job (the start's
// kick) runs and ends, and a row written once nothing lingers is exported
// by a new job that started within seconds of its insert, in both modes
// (the relay listening, and polling the outbox as through a transaction
// pooler without SYNCER_DIRECT_URL). Before the relay told River, each
// such job waited for the poll: 0-220 ms at 200 ms, the p99 through
// PgBouncer.
func TestRelayStartsItsJobAtOnce(t *testing.T) {
	t.Parallel()
	for _, noSession := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoSession=%v", noSession), func(t *testing.T) {
			t.Parallel()
			pool := dbtest.NewPool(t)
			_, err := migrations.Up(t.Context(), pool, nil)
			require.NoError(t, err)
			fake := fakethirdparty.New(fakethirdparty.Config{})
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			b := &bundle{pool: pool, fakeURL: srv.URL}
			cfg := &daemon.Config{HTTPAddr: daemon.HTTPAddrOff, NoSession: noSession}
			cfg.Exporter.HotLinger, cfg.Exporter.ColdLinger = 200*time.Millisecond, 300*time.Millisecond
			daemon.SetFetchPoll(cfg, time.Minute)
			b.start(t, cfg)

			// jobsIn counts the source's jobs in states.
			jobsIn := func(states ...string) int {
				var n int
				require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = $1 AND state::text = ANY($2)`,
					jobs.ExportArgs{}.Kind(), states).Scan(&n))
				return n
			}
			require.Eventually(t, func() bool {
				return jobsIn("completed") > 0 && jobsIn("available", "running", "scheduled", "retryable", "pending") == 0
			}, 20*time.Second, 20*time.Millisecond, "the start's job ran and ended within 20 s (River's poll is at a minute)")

			var id int64
			require.NoError(t, pool.QueryRow(t.Context(), `INSERT INTO resources (payload) VALUES ('{}') RETURNING id`).Scan(&id))
			require.Eventually(t, func() bool {
				return slices.ContainsFunc(fake.Deliveries(), func(d fakethirdparty.Delivery) bool { return d.ID == id })
			}, 20*time.Second, 10*time.Millisecond, "the row was exported within 20 s (River's poll is at a minute)")
			var wait time.Duration
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT attempted_at - created_at FROM river_job WHERE kind = $1 ORDER BY id DESC LIMIT 1`,
				jobs.ExportArgs{}.Kind()).Scan(&wait))
			require.Less(t, wait, 10*time.Second, "the row's job started at once after its insert")
			t.Logf("the row's job started %s after its insert", wait.Round(time.Millisecond))
		})
	}
}
