package e2e

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// TestFrozenHolderIsTakenOverByADaemonWithoutAJob is issue 42's point 6:
// a backlog of `resources` and of a configured source, daemon A exporting
// it, daemon B started meanwhile (its first jobs find the locks busy and A
// completes them: B holds no job), nothing written after that, and A
// frozen (SIGSTOP) inside the transaction that shuts the gate, which a job
// runs on its lock's session: the gate's row stays locked until a taker
// ends that session. B must take both sources over by time alone, within
// 30 s of A's lease running out, and after A wakes nothing is accepted
// under two keys or out of order. On 3cfe467 B's relay waited for good on
// the gate's row as it renewed the gate's lease, polled no more, and B
// moved nothing.
//
// Where A freezes cannot be chosen with a signal, so the test holds the
// gate's row itself from before the freeze until A's lock sessions are
// gone, as A's transaction would.
func TestFrozenHolderIsTakenOverByADaemonWithoutAJob(t *testing.T) {
	t.Parallel()
	const rows = 20000
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	cfgFile := b.installSlowOrders(t, dest)
	// A bulk import, then nothing.
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, rows)
	b.exec(t, `INSERT INTO orders SELECT g, 0 FROM generate_series(1, $1) g`, rows)

	runURL, holder := b.frozenSetup(t)
	// 250 rows a second of resources, 100 of the source: minutes of
	// backlog.
	slow := []string{"--batch-size", "50", "--rate-limit", "5", "--config", cfgFile}
	first, firstErr, second, secondErr := b.startHolderThenSecond(t, runURL, holder, slow...)
	waitFor(t, 30*time.Second, "the first daemon exports both", func() bool {
		return b.fake.Stats().DistinctPairs >= 500 && dest.fake.Stats().DistinctPairs >= 100
	})
	// B's first jobs found the locks busy; A completes them as it fetches
	// them. Then B holds no job and none waits: A's two run.
	waitFor(t, 30*time.Second, "the second daemon holds no job", func() bool {
		return b.scalar(t, `SELECT count(*) FILTER (WHERE state = 'running') * 100 + count(*) FILTER (WHERE state <> ALL('{running,completed}'))
			FROM river_job WHERE kind = $1`, jobs.ExportArgs{}.Kind()) == 200
	})

	// A's transaction on the gate's row, held until A's sessions end.
	ctx := context.Background()
	gate, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gate.Rollback(context.Background()) })
	_, err = gate.Exec(ctx, `SELECT 1 FROM syncer_gate FOR UPDATE`)
	require.NoError(t, err)
	// B's relay renews the gate's lease every 10 s: once it met the row,
	// freeze.
	waitFor(t, 15*time.Second, "the second daemon's relay meets the gate's row", func() bool {
		return b.scalar(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE '%syncer_gate SET lease_until%' AND application_name LIKE '%:' || $1`, strconv.Itoa(second.Process.Pid)) > 0
	})
	require.NoError(t, first.Process.Signal(syscall.SIGSTOP))
	frozenAt := time.Now()
	liveAt, srcAt := b.fake.Stats().DistinctPairs, dest.fake.Stats().DistinctPairs
	released := false
	waitFor(t, 45*time.Second, "the second daemon takes both sources over and moves their rows", func() bool {
		if !released && b.scalar(t, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND a.application_name LIKE '%:' || $1`, strconv.Itoa(first.Process.Pid)) == 0 {
			// A's lock sessions ended: so did its transaction.
			require.NoError(t, gate.Rollback(ctx))
			released = true
		}
		pid, held := holder()
		return held && pid == second.Process.Pid &&
			b.fake.Stats().DistinctPairs > liveAt+40 && dest.fake.Stats().DistinctPairs > srcAt+40
	})
	took := time.Since(frozenAt)
	t.Logf("rows of both sources moving again %.1fs after the freeze (pairs at the freeze: %d of resources, %d of the source)",
		took.Seconds(), liveAt, srcAt)
	// A's lease runs out at most 10 s after the freeze.
	require.Less(t, took, 40*time.Second)

	require.NoError(t, first.Process.Signal(syscall.SIGCONT))
	time.Sleep(5 * time.Second)
	for _, f := range []*fakethirdparty.Server{b.fake, dest.fake} {
		st := f.Stats()
		require.Zero(t, st.DuplicatesOtherKey, "no pair under two keys")
		require.Zero(t, st.KeyConflicts)
		require.Zero(t, st.OutOfOrder, "versions of one id only increase")
	}
	require.NoError(t, first.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.Process.Signal(syscall.SIGTERM))
	require.NoError(t, first.Wait(), firstErr.String())
	require.NoError(t, second.Wait(), secondErr.String())
	require.Contains(t, firstErr.String(), "lock lost", "the woken daemon says it lost the lock")
}
