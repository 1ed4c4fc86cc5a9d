package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/migrations"
)

// setupFast returns a relay of resources that polls every 100 ms and
// renews the gate's lease every 200 ms.
func setupFast(t *testing.T) *bundle {
	t.Helper()
	ts := dbtest.NewMigrated(t)
	rc, err := river.NewClient(riverpgxv5.New(ts.Pool), &river.Config{Schema: ts.Name})
	require.NoError(t, err)
	b := &bundle{pool: ts.Pool, exp: &exported{names: []string{jobs.Resources}, held: map[string]bool{}}}
	b.relay, err = outbox.New(ts.Pool, rc, b.exp, &outbox.Config{
		Channel:      migrations.Channel(ts.Name),
		LockKey:      locks.RelayKey(ts.Name),
		PollInterval: 100 * time.Millisecond,
		LeaseTTL:     600 * time.Millisecond,
	})
	require.NoError(t, err)
	return b
}

// A holder frozen inside the transaction that shuts the gate (a job does
// so on its lock's session, which has no idle timeout) keeps the gate's
// row locked until a taker ends its session; the taker's job comes from
// the relay's poll, so the poll must not wait for that row. On 3cfe467
// the relay renewed the gate's lease before its first poll and between
// polls, unbounded: it waited for good, and no job ever came.
func TestPollDoesNotWaitForAFrozenHoldersGateRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupFast(t)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)

	frozen, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = frozen.Rollback(context.Background()) })
	_, err = frozen.Exec(ctx, `SELECT 1 FROM syncer_gate FOR UPDATE`)
	require.NoError(t, err)

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.relay.Run(rctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	require.Eventually(t, func() bool { return b.syncJobs(t, "available") == 1 }, 5*time.Second, 20*time.Millisecond,
		"a job of resources, pending and held by nobody, whatever holds the gate's row")
	// Several renewals were due meanwhile; the polls went on.
	polls := b.relay.Stats()
	time.Sleep(time.Second)
	require.Equal(t, polls.JobsInserted, b.relay.Stats().JobsInserted, "one waiting job is enough")
	require.Equal(t, 1, b.syncJobs(t, "available"))
}

// A waiting job counts only once something makes it available: River's
// scheduler does, on the leader alone, and the leader may be the frozen
// process. So the poll makes a job due for a while available itself; a
// job snoozed into the future (a pause the third party asked for) is left
// to its time.
func TestPollMakesAnOverdueJobAvailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, jobs.Resources, "orders")
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY)`)
	b.exec(t, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.NoError(t, b.relay.Kick(ctx))
	require.Equal(t, 1, b.sourceJobs(t, jobs.Resources, "available"))
	require.Equal(t, 1, b.sourceJobs(t, "orders", "available"))

	// Both snoozed, as a job that found its lock busy or was told to
	// wait: resources' was due a minute ago, orders' is due in a minute.
	b.exec(t, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + CASE WHEN args->>'source' = $1
		THEN interval '-1 minute' ELSE interval '1 minute' END`, jobs.Resources)
	// A change of orders comes: its waiting job covers it.
	b.exec(t, `INSERT INTO syncer_outbox (op) VALUES ($1)`, migrations.SourceOp("orders"))
	require.NoError(t, b.relay.Poll(ctx))
	require.Zero(t, b.count(t, `SELECT count(*) FROM syncer_outbox`))
	require.Equal(t, 1, b.sourceJobs(t, jobs.Resources, "available"), "the overdue job made available, no other inserted")
	require.Equal(t, 0, b.sourceJobs(t, jobs.Resources, "scheduled"))
	require.Equal(t, 1, b.sourceJobs(t, "orders", "scheduled"), "a job due later is left to its time")
	require.Equal(t, int64(1), b.relay.Stats().JobsRetried)

	// A retryable one (an unexpected error) the same.
	b.exec(t, `UPDATE river_job SET state = 'retryable', scheduled_at = now() - interval '10 seconds' WHERE args->>'source' = $1`, jobs.Resources)
	require.NoError(t, b.relay.Poll(ctx))
	require.Equal(t, 1, b.sourceJobs(t, jobs.Resources, "available"))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM river_job`))
}
