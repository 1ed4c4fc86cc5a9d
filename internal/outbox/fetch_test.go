package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/outbox"
)

// Config.Fetch is told the jobs a round inserted or made available, once
// the round committed (the daemon's River fetches them then, issue 58),
// and nothing when a waiting job covered the events.
func TestRelayTellsFetchTheJobsItCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var b *bundle
	var told [][]int64
	var visible []int
	b = setupWith(t, func(c *outbox.Config) {
		c.Fetch = func(ctx context.Context, js []*rivertype.JobRow) {
			var ids []int64
			for _, j := range js {
				ids = append(ids, j.ID)
			}
			told = append(told, ids)
			// From another connection: committed.
			visible = append(visible, b.count(t, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'available'`, ids))
		}
	})
	require.NoError(t, outbox.RenewLease(ctx, b.pool, time.Minute))

	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.NoError(t, b.relay.Notified(ctx))
	require.Len(t, told, 1, "the job inserted")
	require.Len(t, told[0], 1)
	require.Equal(t, []int{1}, visible, "committed when told")

	// A waiting job covers the next events: nothing to tell.
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.NoError(t, b.relay.Notified(ctx))
	require.Len(t, told, 1)

	// A waiting job overdue is made available: told too.
	b.exec(t, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() - interval '1 minute' WHERE kind = $1`, jobs.ExportArgs{}.Kind())
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.NoError(t, b.relay.Notified(ctx))
	require.Equal(t, [][]int64{told[0], told[0]}, told, "the overdue job made available")
	require.Equal(t, []int{1, 1}, visible)
}
