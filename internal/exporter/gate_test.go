package exporter

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/locks"
)

// The gate shuts once every feed of the process has a job lingering hot,
// not before, and opens as soon as one goes cold.
func TestGateShutsOnlyWhileEveryFeedIsHot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ts := dbtest.NewMigrated(t)
	locker, err := locks.New(ts.Pool.Config().ConnConfig, nil)
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	lk, err := locker.TryAcquire(ctx, 59)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Release(ctx) })
	armed := func() bool {
		var a bool
		require.NoError(t, ts.Pool.QueryRow(ctx, `SELECT armed FROM syncer_gate`).Scan(&a))
		return a
	}
	g := newGate(ts.Pool, slog.New(slog.DiscardHandler), func() int { return 2 })
	_, err = g.noteCold(ctx, "a") // opens it, whatever it was
	require.NoError(t, err)
	require.True(t, armed())

	require.NoError(t, g.noteHot(ctx, "a", lk))
	require.NoError(t, g.noteHot(ctx, "a", lk)) // a stale job of a beside the new one
	require.True(t, armed(), "b has no hot job: its writers must notify")
	require.NoError(t, g.noteHot(ctx, "b", lk))
	require.False(t, armed())

	opened, err := g.noteCold(ctx, "a")
	require.NoError(t, err)
	require.True(t, armed())
	require.NotEmpty(t, opened)
	require.True(t, g.settled(ctx, ""), "nothing to wait for")
	require.Equal(t, map[string]int{"a": 1, "b": 1}, g.hot)
}

// A waker takes a notification only while a job of its feed is active,
// and the last job to leave learns of one it did not handle.
func TestWakersReachOnlyActiveJobs(t *testing.T) {
	t.Parallel()
	var ws wakers
	require.False(t, ws.of("s").wake(), "no job: the relay starts one")
	a := ws.awaken("s")
	require.True(t, ws.of("s").wake())
	require.False(t, a.end(), "the last job leaves")
	require.False(t, ws.of("s").isActive())

	first, second := ws.awaken("s"), ws.awaken("s")
	require.True(t, ws.of("s").wake())
	require.True(t, first.end(), "the other job is still active")
	require.False(t, second.end())

	ws.awaken("gone")
	ws.forget("gone")
	require.False(t, ws.of("gone").isActive(), "an abandoned job's waker is no one's")
}
