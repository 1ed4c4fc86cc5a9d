package exporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// One key, one body (section 2) where a body could be rebuilt: the lock's
// session ended by the database (pg_terminate_backend) while batches are
// in flight and their marker transactions on the wire, rows of the
// batches left recorded updated before the next holder takes over, and
// the next holder's resume and pass. Every push, by either holder, is
// keyed by its own body, and no key ever comes with a second body.
func TestLockSessionEndedMidPassKeepsOneKeyOneBody(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{BatchSize: 10}, 4)
	b.insert(t, 200)
	inst := b.e.cfg.Installation
	b.pusher.answer = func(ctx context.Context, i int, bt delivery.Batch) (*delivery.Outcome, error) {
		if i == 5 {
			// The database ends the lock's session under the pass: this
			// answer and those after it cannot be marked. The call waits
			// for the session to be gone: pg_terminate_backend alone
			// returns once the signal is sent, and a marker transaction
			// quick enough still found the lock held by the exiting
			// session, marked this batch, and left nothing recorded.
			_, err := b.pool.Exec(context.WithoutCancel(ctx), `SELECT pg_terminate_backend($1, 10000)`, b.lk.PID())
			require.NoError(t, err)
		}
		return slow(2*time.Millisecond)(ctx, i, bt)
	}
	_, err := b.passAll(t)
	require.Error(t, err)
	select {
	case <-b.lk.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not lost")
	}
	require.NotEmpty(t, b.recorded(t), "batches sent and not marked stay recorded")

	// Every row changes before the next holder: a body rebuilt from the
	// rows would differ from the one its key was made of.
	_, err = b.pool.Exec(t.Context(), `UPDATE resources SET payload = payload || '{"changed": true}'`)
	require.NoError(t, err)

	locker, err := locks.New(b.pool.Config().ConnConfig, nil)
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	var lk *locks.Lock
	require.Eventually(t, func() bool {
		lk, err = locker.TryAcquire(t.Context(), b.e.LockKey(jobs.Resources))
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the next holder takes the lock")
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	b.pusher.answer = nil
	require.NoError(t, b.e.resume(t.Context(), lk, b.rows(), b.src.owns))
	res, err := b.e.pass(t.Context(), lk, b.rows(), feed.Start, 0, time.Time{})
	require.NoError(t, err)
	require.True(t, res.done)
	require.Equal(t, 200, b.count(t, "synced_at IS NOT NULL"))
	require.Empty(t, b.recorded(t))

	calls, _, overlaps, unrecorded := b.pusher.snapshot()
	require.Zero(t, overlaps)
	require.Zero(t, unrecorded, "every push's key and body were recorded together first")
	bodies := map[string]string{}
	for _, c := range calls {
		require.Equal(t, thirdparty.BatchKey(inst, c.Salt, c.Body), c.Key, "a key is its body's")
		if first, ok := bodies[c.Key]; ok {
			require.Equal(t, first, string(c.Body), "key %s came with a second body", c.Key)
		}
		bodies[c.Key] = string(c.Body)
	}
}
