package e2e

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/status"
)

// TestFrozenHolderIsTakenOver freezes (SIGSTOP) the `syncer run` holding
// the export lock for 60 s mid-drain while a second one runs: the second
// takes over within 30 s (one lease, 10 s, and a poll) and drains
// everything, rows updated meanwhile included; when the first wakes it
// sends nothing more, and the key-honouring third party never accepted a
// pair under two keys, or out of order.
func TestFrozenHolderIsTakenOver(t *testing.T) {
	t.Parallel()
	const rows, updated = 6000, 500
	b := setup(t, fakethirdparty.Config{})
	b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`, rows)
	runURL, holder := b.frozenSetup(t)
	// Slow enough to be mid-drain for seconds: 50 rows a request, 8
	// requests a second.
	slow := []string{"--batch-size", "50", "--rate-limit", "8"}
	first, firstErr, second, secondErr := b.startHolderThenSecond(t, runURL, holder, slow...)
	waitFor(t, time.Minute, "mid-drain", func() bool { return b.fake.Stats().DistinctPairs >= 1000 })

	require.NoError(t, first.Process.Signal(syscall.SIGSTOP))
	frozenAt := time.Now()
	synced := b.synced(t)
	waitFor(t, 45*time.Second, "the second daemon takes over", func() bool {
		pid, held := holder()
		return held && pid == second.Process.Pid
	})
	took := time.Since(frozenAt)
	t.Logf("takeover %.1fs after the freeze (%d rows synced at the freeze)", took.Seconds(), synced)
	require.Less(t, took, 30*time.Second)

	// New versions of rows the frozen daemon may hold in its batches.
	b.exec(t, `UPDATE resources SET payload = jsonb_build_object('updated', id) WHERE id <= $1`, updated)
	b.waitAllSynced(t, time.Until(frozenAt.Add(58*time.Second)))
	before := b.fake.Stats()

	time.Sleep(time.Until(frozenAt.Add(60 * time.Second)))
	require.NoError(t, first.Process.Signal(syscall.SIGCONT))
	time.Sleep(5 * time.Second)
	after := b.fake.Stats()
	t.Logf("after the wake: %d requests more, %d pairs accepted of %d, %d under two keys, %d out of order, %d key conflicts",
		after.Requests-before.Requests, after.DistinctPairs, rows+updated, after.DuplicatesOtherKey, after.OutOfOrder, after.KeyConflicts)
	require.Equal(t, before.Requests, after.Requests, "the woken daemon sent nothing (nothing was left to send)")
	require.Equal(t, int64(rows+updated), after.DistinctPairs, "every row and every update delivered")
	require.Zero(t, after.DuplicatesOtherKey, "no pair under two keys")
	require.Zero(t, after.KeyConflicts)
	require.Zero(t, after.OutOfOrder, "versions of one id only increase")
	require.Zero(t, after.OverlappingIDs)
	b.waitAllSynced(t, 10*time.Second)

	for _, cmd := range []*exec.Cmd{first, second} {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	}
	require.NoError(t, first.Wait(), firstErr.String())
	require.NoError(t, second.Wait(), secondErr.String())
	t.Logf("the frozen daemon's log:\n%s", firstErr.String())
	// It finds out by its lease's deadline, by its self-check (the taker
	// ended its session) or by a refused request, whichever runs first.
	require.Contains(t, firstErr.String(), "lock lost", "the woken daemon says it lost the lock")
}

func (b *bundle) synced(t *testing.T) int64 {
	t.Helper()
	r, err := status.Gather(context.Background(), b.pool, nil)
	require.NoError(t, err)
	return r.Synced
}
