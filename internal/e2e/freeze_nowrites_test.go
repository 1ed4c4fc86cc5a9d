package e2e

import (
	"context"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/locks"
)

// TestFrozenHolderWithBacklogAndNoWrites freezes (SIGSTOP, 60 s) the daemon
// holding the export locks after a minute of writes to `resources` and to a
// configured source, with a backlog of both left and nothing written after
// that: no write brings a job, so only the lease's time can move the export
// to the second daemon. Rows of both must move again within 30 s of the
// freeze, and nothing is accepted under two keys after the wake.
func TestFrozenHolderWithBacklogAndNoWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	cfgFile := b.installSlowOrders(t, dest)

	runURL, holder := b.frozenSetup(t)
	// 100 rows a second to each third party, far fewer than written.
	slow := []string{"--batch-size", "20", "--rate-limit", "5", "--config", cfgFile}
	first, firstErr, second, secondErr := b.startHolderThenSecond(t, runURL, holder, slow...)
	// A minute of writes, then none: a backlog that no new write will
	// ever announce.
	n := 0
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		b.exec(t, `INSERT INTO resources (payload) SELECT jsonb_build_object('w', g) FROM generate_series(1, 20) g`)
		b.exec(t, `INSERT INTO orders SELECT g, 0 FROM generate_series($1::int, $1::int + 19) g`, n)
		n += 20
	}
	pid, held := holder()
	require.True(t, held)
	frozen, frozenErr := first, firstErr
	if pid == second.Process.Pid {
		frozen, frozenErr = second, secondErr
	}
	require.NoError(t, frozen.Process.Signal(syscall.SIGSTOP))
	frozenAt := time.Now()
	liveAt, srcAt := b.fake.Stats().DistinctPairs, dest.fake.Stats().DistinctPairs
	waitFor(t, 45*time.Second, "rows of resources and of the source move again", func() bool {
		return b.fake.Stats().DistinctPairs > liveAt+40 && dest.fake.Stats().DistinctPairs > srcAt+40
	})
	took := time.Since(frozenAt)
	t.Logf("rows moving %.1fs after the freeze (pairs at the freeze: %d of resources, %d of the source; %d written to each)",
		took.Seconds(), liveAt, srcAt, n)
	require.Less(t, took, 30*time.Second)
	time.Sleep(time.Until(frozenAt.Add(60 * time.Second)))
	require.NoError(t, frozen.Process.Signal(syscall.SIGCONT))
	time.Sleep(5 * time.Second)
	for _, f := range []*fakethirdparty.Server{b.fake, dest.fake} {
		st := f.Stats()
		require.Zero(t, st.DuplicatesOtherKey, "no pair under two keys")
		require.Zero(t, st.KeyConflicts)
		require.Zero(t, st.OutOfOrder)
	}
	require.NoError(t, first.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.Process.Signal(syscall.SIGTERM))
	require.NoError(t, first.Wait(), firstErr.String())
	require.NoError(t, second.Wait(), secondErr.String())
	_ = frozenErr
}

// frozenSetup returns the URL the daemons of a freeze test run with (the
// session names left to syncer, so the lock's holder names its process)
// and a look at the export lock's holder: its process and whether held.
func (b *bundle) frozenSetup(t *testing.T) (string, func() (int, bool)) {
	t.Helper()
	u, err := url.Parse(b.dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Del("application_name")
	u.RawQuery = q.Encode()
	schema := q.Get("search_path")
	return u.String(), func() (int, bool) {
		h, held, err := locks.HolderOf(context.Background(), b.pool, locks.ExportKey(schema, jobs.Resources))
		require.NoError(t, err)
		return h.Process, held
	}
}
