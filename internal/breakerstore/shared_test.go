package breakerstore_test

import (
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

func TestSharedCachesReadsAndSeesOthersAfterRefresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	// A refresh period longer than the test: the cache must answer alone.
	a := breakerstore.NewShared(b.store, time.Hour)
	st, err := a.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, breakerstore.State{}, st)

	// Its own writes show at once.
	open := breakerstore.Breaker{State: gobreaker.StateOpen, Generation: 1, Expiry: time.Now().Add(time.Minute)}
	require.NoError(t, a.SetBreaker(ctx, open))
	st, err = a.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, gobreaker.StateOpen, st.Breaker.State)
	require.NoError(t, a.SetRate(ctx, breakerstore.Rate{Limit: 3}))
	st, err = a.Load(ctx)
	require.NoError(t, err)
	require.InDelta(t, 3, st.Rate.Limit, 0)
	require.False(t, st.Rate.UpdatedAt.IsZero())

	// Another daemon's write is not seen within the period...
	_, otherStore := b.newStore(t)
	pause := breakerstore.Pause{Until: time.Now().Add(time.Minute), Cause: "429 Retry-After: 60", Status: 429}
	require.NoError(t, otherStore.SetPause(ctx, pause))
	st, err = a.Load(ctx)
	require.NoError(t, err)
	require.False(t, st.Pause.Active(time.Now()), "cached")

	// ...and is, by a view whose period has passed.
	fresh := breakerstore.NewShared(b.store, time.Nanosecond)
	st, err = fresh.Load(ctx)
	require.NoError(t, err)
	require.True(t, st.Pause.Active(time.Now()))
	require.Equal(t, "429 Retry-After: 60", st.Pause.Cause)
	require.Equal(t, gobreaker.StateOpen, st.Breaker.State)

	// A refusal invalidates the cache, so Since comes from the database.
	changed, err := a.SetRefusal(ctx, breakerstore.KeyConfiguration, breakerstore.Refusal{Refused: true, Status: 308, Message: "redirect"})
	require.NoError(t, err)
	require.True(t, changed)
	st, err = a.Load(ctx)
	require.NoError(t, err)
	require.True(t, st.Configuration.Refused)
	require.False(t, st.Configuration.Since.IsZero())
	require.True(t, st.Pause.Active(time.Now()), "the reload brought the other daemon's pause too")
}
