package delivery_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 43: Ready says, without sending and without taking a token, how
// long until the deliverer would send: its rate limit, refused
// credentials, a person's pause.
func TestReady(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	d := b.deliverer(t, nil, &delivery.Config{RateLimit: 1, RateBurst: 1})
	ctx := t.Context()

	for range 3 {
		wait, err := d.Ready(time.Now())
		require.NoError(t, err)
		require.Zero(t, wait, "asking takes no token")
	}
	_, err := d.Deliver(ctx, delivery.Batch{Items: items(1, 1, nil)})
	require.NoError(t, err)
	wait, err := d.Ready(time.Now())
	require.ErrorIs(t, err, delivery.ErrRateLimited)
	require.Greater(t, wait, 500*time.Millisecond)
	require.LessOrEqual(t, wait, time.Second)

	d.AdoptHold(ctx, breakerstore.Hold{Paused: true, By: "command line", Since: time.Now(), Generation: 1})
	wait, err = d.Ready(time.Now())
	require.ErrorIs(t, err, delivery.ErrHeld)
	require.Positive(t, wait)
}

func TestReadyAfterARefusal(t *testing.T) {
	t.Parallel()
	client := hostile(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	d := newDeliverer(t, client, nil, &delivery.Config{AuthProbeInterval: time.Minute})
	_, err := d.Deliver(t.Context(), delivery.Batch{Items: items(1, 1, nil)})
	require.ErrorIs(t, err, delivery.ErrCredentials)
	wait, err := d.Ready(time.Now())
	require.ErrorIs(t, err, delivery.ErrCredentials)
	require.Greater(t, wait, 30*time.Second)
}

// loadCounter counts the reads of the shared facts.
type loadCounter struct {
	delivery.Store
	loads atomic.Int64
}

func (c *loadCounter) Load(ctx context.Context) (breakerstore.State, error) {
	c.loads.Add(1)
	return c.Store.Load(ctx)
}

// Issue 54: Ready of a deliverer that sends leaves the read of the shared
// facts to its requests (each reads them first, once a second at most):
// an exporter's lane asks Ready of its tenants one after another and
// waited for each read. Once they are readyLoadAfter old (it does not
// send), or while it is held, Ready reads them, so a resume reaches it.
func TestReadyLeavesTheSharedFactsToRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	db := newDatabase(t)
	store := &loadCounter{Store: db.shared(t)}
	d := b.deliverer(t, store, &delivery.Config{})
	ctx := t.Context()
	_, err := d.Deliver(ctx, delivery.Batch{Items: items(1, 1, nil)})
	require.NoError(t, err)
	loads := store.loads.Load()
	require.Positive(t, loads)

	time.Sleep(1100 * time.Millisecond) // past loadEvery
	for range 3 {
		_, err := d.Ready(time.Now())
		require.NoError(t, err)
	}
	require.Equal(t, loads, store.loads.Load(), "a sending deliverer's Ready reads nothing")
	_, err = d.Deliver(ctx, delivery.Batch{Items: items(1, 1, nil)})
	require.NoError(t, err)
	require.Equal(t, loads+1, store.loads.Load(), "its request reads them")

	time.Sleep(2100 * time.Millisecond) // past readyLoadAfter
	_, err = d.Ready(time.Now())
	require.NoError(t, err)
	require.Equal(t, loads+2, store.loads.Load(), "not sending: Ready reads them")

	d.AdoptHold(ctx, breakerstore.Hold{Paused: true, By: "command line", Since: time.Now(), Generation: 1})
	time.Sleep(1100 * time.Millisecond) // past loadEvery
	_, err = d.Ready(time.Now())
	require.ErrorIs(t, err, delivery.ErrHeld)
	require.Equal(t, loads+3, store.loads.Load(), "held: Ready reads them at loadEvery")
}
