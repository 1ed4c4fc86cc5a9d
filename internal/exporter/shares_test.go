package exporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With two daemons, a daemon starts at most its share of a source's
// lanes, gives one up when it runs more, and leaves a lane it gave up to
// the other daemon for LaneShareWait.
func TestLaneSharesKeepTheDaemonsShare(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	peers, asked := 2, 0
	lanes := []string{"s@0", "s@1", "s@2", "s@3"}
	ls := &laneShares{
		peersOf:  func(context.Context, string) (int, error) { asked++; return peers, nil },
		now:      func() time.Time { return now },
		exported: func(string) bool { return true },
		lanesOf:  func(string) []string { return lanes },
		wakers:   &wakers{},
	}
	ctx := t.Context()
	require.Zero(t, ls.atStart(ctx, "s", now), "not a lane")
	require.Equal(t, 2, ls.atStart(ctx, "s@0", now))
	require.Equal(t, 2, ls.atStart(ctx, "s@1", now))
	require.Equal(t, 1, asked, "the count of daemons is read once within peersFresh")
	require.Zero(t, ls.atStart(ctx, "s@0", now.Add(-2*LaneShareWait)), "an old job runs whatever")

	a0, over := ls.awakenWithin("s@0", 2)
	require.False(t, over)
	_, over = ls.awakenWithin("s@1", 2)
	require.False(t, over)
	_, over = ls.awakenWithin("s@2", 2)
	require.True(t, over, "the share is running here")
	a3, _ := ls.awakenWithin("s@3", 0) // started with no bound: the peer came later
	require.NotNil(t, a3)

	require.False(t, ls.leaveForShare(ctx, "s@3", now), "a lane just taken stays")
	now = now.Add(laneLeaveAfter + peersFresh)
	require.True(t, ls.leaveForShare(ctx, "s@3", now.Add(-laneLeaveAfter)))
	require.False(t, ls.leaveForShare(ctx, "s@0", now.Add(-laneLeaveAfter)), "one leaves at a time: the rest is the share")
	require.Equal(t, 2, ls.atStart(ctx, "s@3", now.Add(-2*LaneShareWait)), "given up lately: left to the other daemon")

	a0.end()
	_, over = ls.awakenWithin("s@2", 2)
	require.False(t, over, "s@3 leaving and s@0 ended: room for one")
}
