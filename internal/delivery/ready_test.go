package delivery_test

import (
	"net/http"
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
