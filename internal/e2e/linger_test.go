package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// twoSourcesOneDestination installs orders and items, both to one
// destination, and returns its fake and the configuration.
func twoSourcesOneDestination(t *testing.T, b *bundle) (*destination, func(*daemon.Config)) {
	t.Helper()
	dest := newDestination(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, v int)`)
	b.exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, v int)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  one:
    url: %s
sources:
  - {table: orders, key: id, destination: one}
  - {table: items, key: id, destination: one}
`, dest.url), nil)
	b.installSources(t, cfg)
	return dest, func(c *daemon.Config) { c.Sources = cfg }
}

// sourceJobs counts the source jobs River was given, in every state.
func (b *bundle) sourceJobs(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'source' <> $2`, jobs.ExportArgs{}.Kind(), jobs.Resources).Scan(&n))
	return n
}

// writeRounds writes rounds of n single-row transactions into each of
// tables (the k-th table's ids from k million), concurrently, waiting
// after each round until dest received every row written so far: both
// sources keep flowing while writes go on.
func (b *bundle) writeRounds(t *testing.T, dest *destination, tables []string, rounds, n int) {
	t.Helper()
	for r := range rounds {
		var wg sync.WaitGroup
		for k, tbl := range tables {
			wg.Go(func() {
				for i := k*1_000_000 + r*n; i < k*1_000_000+(r+1)*n; i++ {
					if _, err := b.pool.Exec(context.Background(), `INSERT INTO `+tbl+` VALUES ($1, $2)`, i, i); err != nil {
						t.Errorf("insert into %s: %v", tbl, err)
						return
					}
				}
			})
		}
		wg.Wait()
		// A bound far above any pass, below MaxRun (30 s): a source that
		// waited for the other's job to end would miss it.
		waitFor(t, 20*time.Second, fmt.Sprintf("round %d delivered", r), func() bool {
			return dest.fake.Stats().DistinctPairs >= int64(len(tables)*(r+1)*n)
		})
	}
}

// Two sources of one destination, written into round after round: their
// jobs linger between rounds, so River is given a handful of jobs for
// hundreds of transactions, and the two take turns at the destination's
// lock, so neither waits for the other's job to end.
func TestSourceJobsLingerAndShareTheirDestination(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest, cfg := twoSourcesOneDestination(t, b)
	b.startDaemon(t, cfg)

	const rounds, n = 8, 40
	b.writeRounds(t, dest, []string{"orders", "items"}, rounds, n)
	b.waitSourcesDrained(t, "orders", "items")

	ids := byID(dest.fake)
	require.Len(t, ids, 2*rounds*n)
	requireOnceInOrder(t, dest.fake)
	// Without the linger, every pass is a job of its own: one per round
	// at least, for each source.
	jobsGiven := b.sourceJobs(t)
	t.Logf("%d source jobs for %d transactions", jobsGiven, 2*rounds*n)
	require.Less(t, jobsGiven, rounds, "%d source jobs for %d transactions", jobsGiven, 2*rounds*n)
}

// A daemon stopped (as SIGTERM does) while its source jobs linger, hot
// and cold, leaves nothing half-done: Run returns nil, no job is left
// running, no batch stays recorded unsent, and a new daemon sends every
// row written meanwhile, each once.
func TestSourceLingerEndsCleanlyOnStop(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest, cfg := twoSourcesOneDestination(t, b)
	d := b.startDaemon(t, cfg)

	b.writeRounds(t, dest, []string{"orders", "items"}, 2, 30)
	// Writes flowing as the stop comes: the jobs are hot.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 500_000; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.pool.Exec(context.Background(), `INSERT INTO orders VALUES ($1, $2)`, i, i); err != nil {
				t.Errorf("insert: %v", err)
				return
			}
		}
	})
	waitFor(t, 20*time.Second, "writes flowing out", func() bool { return byID(dest.fake)["500010"] != nil })
	require.NoError(t, d.stop(), "the daemon stops cleanly mid-linger")
	close(stop)
	wg.Wait()

	var running int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'running'`, jobs.ExportArgs{}.Kind()).Scan(&running))
	require.Zero(t, running, "no source job left running")
	recs, err := checkpoint.Recorded(context.Background(), b.pool)
	require.NoError(t, err)
	require.Empty(t, recs, "no batch left recorded and unmarked")

	b.startDaemon(t, cfg)
	b.waitSourcesDrained(t, "orders", "items")
	requireOnceInOrder(t, dest.fake)
	require.Zero(t, dest.fake.Stats().DuplicatesSameKey+dest.fake.Stats().DuplicatesOtherKey, "nothing sent twice")
}
