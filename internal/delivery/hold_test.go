package delivery_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 45: a person's pause is logged once when it starts and once when
// it ends, at info, however many requests it refuses meanwhile (each is a
// quiet wait, which the exporter logs at debug); an older generation read
// late never undoes a newer one; nothing reaches the third party while it
// holds.
func TestPersonsPauseLoggedOnceAndNeverUndoneByAnOlderRead(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{}, "")
	logs := &recorder{}
	d := b.deliverer(t, nil, &delivery.Config{Logger: slog.New(logs)})
	ctx := t.Context()
	const paused = "delivery: destination paused by a person; nothing is sent to it and its pending rows are kept until it is resumed"
	const resumed = "delivery: destination resumed by a person; sending again"

	require.EqualValues(t, 2, d.AdoptHold(ctx, breakerstore.Hold{Paused: true, By: "command line", Since: time.Now(), Generation: 2}))
	for range 5 {
		require.EqualValues(t, 2, d.AdoptHold(ctx, breakerstore.Hold{Paused: true, By: "command line", Generation: 2}))
		_, err := d.Deliver(ctx, batch("", items(1, 1, nil)))
		require.ErrorIs(t, err, delivery.ErrHeld)
		var we *delivery.WaitError
		require.True(t, errors.As(err, &we))
		require.True(t, we.Quiet(), "a person's pause is a quiet wait")
	}
	// A read that began before the pause and ended after it.
	require.EqualValues(t, 2, d.AdoptHold(ctx, breakerstore.Hold{Paused: false, Generation: 1}))
	_, err := d.Deliver(ctx, batch("", items(1, 1, nil)))
	require.ErrorIs(t, err, delivery.ErrHeld, "an older generation does not undo the pause")
	require.Empty(t, b.fake.Deliveries(), "nothing sent while paused")

	require.EqualValues(t, 3, d.AdoptHold(ctx, breakerstore.Hold{Paused: false, By: "console", Generation: 3}))
	_, err = d.Deliver(ctx, batch("", items(1, 1, nil)))
	require.NoError(t, err)
	require.Len(t, b.fake.Deliveries(), 1)

	require.Equal(t, 1, logs.countMsg(paused))
	require.Equal(t, 1, logs.countMsg(resumed))
	for _, rec := range logs.records() {
		if rec.Message == paused || rec.Message == resumed {
			require.Equal(t, slog.LevelInfo, rec.Level)
		}
	}
	require.Zero(t, logs.count(slog.LevelWarn), "no warning for a person's pause")

	var other *delivery.WaitError = &delivery.WaitError{Err: delivery.ErrPaused, Wait: time.Second}
	require.False(t, other.Quiet(), "the third party's pause is not a person's")
}
