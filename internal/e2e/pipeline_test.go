package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgx's and net/http's idle connection goroutines end shortly after
		// their pools close.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	)
}

func TestDrainsEveryRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.startDaemon(t, nil)

	ids := b.insert(t, 5000, 4)
	r := b.waitDrained(t, 60*time.Second)

	require.Equal(t, int64(5000), r.Total)
	require.Equal(t, int64(0), r.Unsynced)
	require.Equal(t, int64(5000), r.Synced)
	st := b.fake.Stats()
	require.Equal(t, 5000, int(st.DistinctPairs))
	require.Equal(t, 0, int(st.DuplicatePairs))
	latest := b.fake.Latest()
	for _, id := range ids {
		require.Equal(t, int64(1), latest[id], "id %d", id)
	}
	var unsyncedAt int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM resources WHERE synced_at IS NULL`).Scan(&unsyncedAt))
	require.Zero(t, unsyncedAt)
}

func TestRolledBackInsertIsNeverExported(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.startDaemon(t, nil)
	ctx := context.Background()

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	var ghost int64
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ('{"ghost": true}') RETURNING id`).Scan(&ghost))
	require.NoError(t, tx.Rollback(ctx))
	ids := b.insert(t, 10, 1)
	b.waitDrained(t, 30*time.Second)

	latest := b.fake.Latest()
	require.NotContains(t, latest, ghost)
	for _, id := range ids {
		require.Contains(t, latest, id)
	}
	var events int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_outbox`).Scan(&events))
	require.Zero(t, events, "relayed events are pruned")
}

func TestUpdateExportsNewVersion(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.startDaemon(t, nil)
	ctx := context.Background()

	ids := b.insert(t, 3, 1)
	b.waitDrained(t, 30*time.Second)
	for v := 2; v <= 4; v++ {
		_, err := b.pool.Exec(ctx, `UPDATE resources SET payload = jsonb_build_object('v', $1::int) WHERE id = $2`, v, ids[0])
		require.NoError(t, err)
		waitFor(t, 30*time.Second, "new version exported", func() bool { return b.fake.Latest()[ids[0]] == int64(v) })
	}
	// A write that does not change the payload is not a new version.
	_, err := b.pool.Exec(ctx, `UPDATE resources SET payload = payload WHERE id = $1`, ids[0])
	require.NoError(t, err)

	var version int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT version FROM resources WHERE id = $1`, ids[0]).Scan(&version))
	require.Equal(t, int64(4), version)
	b.waitDrained(t, 30*time.Second)
	require.Equal(t, version, b.fake.Latest()[ids[0]])
	require.Zero(t, b.fake.Stats().OutOfOrder)
}

func TestThreeDaemonsNeverDuplicate(t *testing.T) {
	t.Parallel()
	// The fake ignores keys here: any pair sent twice would count.
	b := setup(t, fakethirdparty.Config{IgnoreIdempotencyKey: true})
	for range 3 {
		b.startDaemon(t, func(c *daemon.Config) { c.Exporter.BatchSize = 50 })
	}
	b.insert(t, 3000, 6)
	r := b.waitDrained(t, 90*time.Second)

	require.Equal(t, int64(3000), r.Synced)
	st := b.fake.Stats()
	require.Equal(t, 3000, int(st.DistinctPairs))
	require.Zero(t, st.DuplicatePairs)
}

// A row committed just as the sync job finishes its last pass must still go
// out, without another insert and without waiting for the poll fallback.
func TestRowAtTheEndOfTheLastPass(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.startDaemon(t, func(c *daemon.Config) {
		c.Exporter.HotLinger = time.Millisecond
		c.Exporter.ColdLinger = 5 * time.Millisecond
		// Far longer than the test: only the notification path can save a
		// row that the ending job missed.
		c.PollInterval = 10 * time.Minute
	})
	for i := range 60 {
		time.Sleep(time.Duration(i%7) * 3 * time.Millisecond)
		ids := b.insert(t, 1, 1)
		waitFor(t, 5*time.Second, "row exported", func() bool { _, ok := b.fake.Latest()[ids[0]]; return ok })
	}
}

func TestBurstMakesFewJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	b.startDaemon(t, nil)
	b.insert(t, 10000, 8)
	b.waitDrained(t, 120*time.Second)

	var jobsCreated int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1`,
		jobs.ExportArgs{}.Kind()).Scan(&jobsCreated))
	t.Logf("sync jobs created for a burst of 10,000 inserts: %d", jobsCreated)
	require.LessOrEqual(t, jobsCreated, 20)
	require.Equal(t, 10000, int(b.fake.Stats().DistinctPairs))
}
