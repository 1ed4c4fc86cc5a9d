package breakerstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

func TestSharedWritesOnlyStateChangesAndHandsThemOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a := breakerstore.NewShared(b.store, 50*time.Millisecond)
	settings := gobreaker.Settings{
		Name:        "x",
		MaxRequests: 1,
		Timeout:     time.Minute,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 },
	}
	cbA, err := gobreaker.NewDistributedCircuitBreaker[struct{}](a, settings)
	require.NoError(t, err)

	updates := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM syncer_state WHERE key = 'gobreaker:state:x'`).Scan(&n))
		return n
	}
	var before time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT updated_at FROM syncer_state WHERE key = 'gobreaker:state:x'`).Scan(&before))
	for range 20 {
		_, err := cbA.Execute(func() (struct{}, error) { return struct{}{}, nil })
		require.NoError(t, err)
	}
	var after time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT updated_at FROM syncer_state WHERE key = 'gobreaker:state:x'`).Scan(&after))
	require.Equal(t, before, after, "successes in the closed state write nothing")
	require.Equal(t, 1, updates())

	boom := errors.New("503")
	for range 3 {
		_, _ = cbA.Execute(func() (struct{}, error) { return struct{}{}, boom })
	}
	st, err := cbA.State()
	require.NoError(t, err)
	require.Equal(t, gobreaker.StateOpen, st)

	// Another daemon, taking the export lock over, sees the open breaker.
	_, otherStore := b.newStore(t)
	cbB, err := gobreaker.NewDistributedCircuitBreaker[struct{}](breakerstore.NewShared(otherStore, 50*time.Millisecond), settings)
	require.NoError(t, err)
	called := false
	_, err = cbB.Execute(func() (struct{}, error) { called = true; return struct{}{}, nil })
	require.ErrorIs(t, err, gobreaker.ErrOpenState)
	require.False(t, called)
}
