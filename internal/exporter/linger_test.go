package exporter

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/locks"
)

// Two sources' jobs of one destination take turns at its lock: the one
// that wants it while the other holds it says so; the holder gives it
// back after its pass and wakes it; then the holder waits for its own
// turn rather than take the lock back first.
func TestSourcesOfOneDestinationTakeTurns(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{})
	ctx := t.Context()
	srcA := &Source{name: "a", DestinationName: "one"}
	srcB := &Source{name: "b", DestinationName: "one"}
	a, bt := b.e.newTurn(ctx, srcA), b.e.newTurn(ctx, srcB)
	t.Cleanup(func() { a.done(ctx); bt.done(ctx) })
	wakeB := b.e.wakers.awaken("b")
	t.Cleanup(func() { wakeB.end() })

	_, err := a.take(ctx)
	require.NoError(t, err)
	_, err = bt.take(ctx)
	require.ErrorIs(t, err, locks.ErrLockBusy, "a holds the destination")

	a.handOver(ctx)
	require.Nil(t, a.dk, "a gave the lock back: b waits")
	woken, err := b.e.lingerWait(ctx, wakeB.w, 0)
	require.NoError(t, err)
	require.True(t, woken, "b was woken for its turn")
	_, err = a.take(ctx)
	require.ErrorIs(t, err, locks.ErrLockBusy, "a waits while b's turn is due")

	_, err = bt.take(ctx)
	require.NoError(t, err, "b's turn")
	bt.handOver(ctx)
	require.Nil(t, bt.dk, "a waits: b gives the lock back")
	_, err = a.take(ctx)
	require.NoError(t, err, "a's turn again")

	// Nobody waits: the holder keeps the lock across its passes.
	a.handOver(ctx)
	require.NotNil(t, a.dk)
}

// A feed's wake-up goes to its last active job: a second job of the feed
// that ends leaves it to the first, which handles it when it stops.
func TestWakeUpLeftToTheFeedsOtherJob(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t, Config{})
	first, second := b.e.wakers.awaken("s"), b.e.wakers.awaken("s")
	require.True(t, b.e.Wake("s"))
	require.True(t, second.end(), "the first job is still active")
	require.True(t, b.e.Active("s"))
	first.taken = true // as linger does
	require.True(t, first.w.deactivate(), "the last job to stop finds the wake-up")
	require.False(t, b.e.Active("s"))
	require.False(t, b.e.Wake("s"), "nobody to wake: the relay inserts a job")
}
