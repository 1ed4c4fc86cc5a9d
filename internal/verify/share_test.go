package verify_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/verify"
)

// sharer records the shares a run writes.
type sharer struct {
	mu     sync.Mutex
	shares []breakerstore.VerifyShare
}

func (s *sharer) SetVerifyShare(_ context.Context, v breakerstore.VerifyShare) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shares = append(s.shares, v)
	return nil
}

func (s *sharer) last() breakerstore.VerifyShare {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shares[len(s.shares)-1]
}

// Issue 54 point 15: a run from the command line records its share of the
// destination's rate for the daemons: a quarter while rows are pending
// (the first lookup waits until the daemons can have seen it), three
// quarters otherwise, raised only once the daemons can have seen it and
// lowered at once, renewed as a lease and given back at the end.
func TestPaceYieldsItsShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := setupLookups(t, verify.Range{}, `INSERT INTO resources (payload) VALUES ('{}')`)
	now := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	var slept time.Duration
	clock := func() time.Time { return now }
	sleep := func(_ context.Context, d time.Duration) error {
		slept += d
		now = now.Add(d)
		return nil
	}
	s := &sharer{}
	pace := verify.NewPace(1000, 1).Yield(s).WithClock(clock, sleep)

	// Rows pending: a quarter, after the lag.
	require.NoError(t, pace.Wait(ctx, l.db.Pool, l.src))
	require.Equal(t, verify.ShareLag, slept)
	require.Equal(t, 250.0, pace.Limit())
	require.Equal(t, 0.25, s.last().Share)
	require.Equal(t, now.Add(-verify.ShareLag).Add(verify.ShareLease), s.last().Until)

	// Nothing pending: three quarters asked for at once, used after the lag.
	_, err := l.db.Pool.Exec(ctx, `UPDATE resources SET synced_at = now()`)
	require.NoError(t, err)
	require.NoError(t, pace.Wait(ctx, l.db.Pool, l.src))
	require.Equal(t, 0.75, s.last().Share)
	require.Equal(t, 250.0, pace.Limit(), "not before the daemons can have seen it")
	now = now.Add(verify.ShareLag)
	require.NoError(t, pace.Wait(ctx, l.db.Pool, l.src))
	require.Equal(t, 750.0, pace.Limit())

	// Pending again: a quarter at once.
	_, err = l.db.Pool.Exec(ctx, `INSERT INTO resources (payload) VALUES ('{}')`)
	require.NoError(t, err)
	require.NoError(t, pace.Wait(ctx, l.db.Pool, l.src))
	require.Equal(t, 250.0, pace.Limit())
	require.Equal(t, 0.25, s.last().Share)

	// Given back at the end.
	require.NoError(t, pace.Release(ctx))
	require.Zero(t, s.last().Active(now))
}
