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

// Issue 54: a batch withdrawn while it waits for its token (a lane's pass
// ended) returns ErrWithdrawn, sends nothing and gives its token back;
// the next batch goes when it would have.
func TestDeliverWithdrawnWhileWaitingForItsToken(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	d := b.deliverer(t, nil, &delivery.Config{RateLimit: 1, RateBurst: 1})
	ctx := t.Context()
	_, err := d.Deliver(ctx, delivery.Batch{Items: items(1, 1, nil)})
	require.NoError(t, err)
	before, err := d.Ready(time.Now())
	require.ErrorIs(t, err, delivery.ErrRateLimited)

	sig := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := d.Deliver(delivery.WithWithdraw(ctx, sig), delivery.Batch{Items: items(2, 1, nil)})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // waiting for its token
	close(sig)
	select {
	case err := <-done:
		require.ErrorIs(t, err, delivery.ErrWithdrawn)
	case <-time.After(time.Second):
		t.Fatal("a withdrawn batch still waits for its token")
	}
	require.EqualValues(t, 1, b.fake.Stats().Requests, "nothing of the withdrawn batch sent")
	after, err := d.Ready(time.Now())
	require.ErrorIs(t, err, delivery.ErrRateLimited)
	require.LessOrEqual(t, after, before, "its token given back")

	// A signal closed before the batch is handed over withdraws it only
	// if it would wait: at its token it goes.
	time.Sleep(after)
	_, err = d.Deliver(delivery.WithWithdraw(ctx, sig), delivery.Batch{Items: items(3, 1, nil)})
	require.NoError(t, err)
	require.EqualValues(t, 2, b.fake.Stats().Requests)
}
