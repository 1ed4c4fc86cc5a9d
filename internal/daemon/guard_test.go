package daemon_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

type countingClient struct{ calls int }

func (c *countingClient) Send(context.Context, string, *thirdparty.Request, func(*thirdparty.Answer) (*thirdparty.Result, error)) (*thirdparty.Result, error) {
	c.calls++
	return &thirdparty.Result{}, nil
}

// A request goes only while every lock its context came from holds; once
// one is gone the guard refuses before the client is called, with an error
// the deliverer returns at once.
func TestGuardSendsOnlyUnderItsLocks(t *testing.T) {
	t.Parallel()
	ts := dbtest.NewMigrated(t)
	cc, err := pgx.ParseConfig(ts.DSN)
	require.NoError(t, err)
	locker, err := locks.New(cc, &locks.Config{Lease: true})
	require.NoError(t, err)
	defer locker.Close()
	ctx := context.Background()
	lk, err := locker.TryAcquire(ctx, locks.ExportKey(ts.Name, jobs.Resources))
	require.NoError(t, err)
	lctx, cancel := lk.Context(ctx)
	defer cancel()

	inner := &countingClient{}
	client := daemon.Guarded(inner)
	_, err = client.Send(lctx, "k", &thirdparty.Request{}, nil)
	require.NoError(t, err)
	_, err = client.Send(ctx, "k", &thirdparty.Request{}, nil)
	require.NoError(t, err, "a request under no lock is not the guard's business")
	require.Equal(t, 2, inner.calls)

	require.NoError(t, lk.Release(ctx))
	_, err = client.Send(lctx, "k", &thirdparty.Request{}, nil)
	require.ErrorIs(t, err, locks.ErrReleased)
	var we *delivery.WaitError
	require.True(t, errors.As(err, &we), "returned by the deliverer as it is, not retried")
	require.Equal(t, 2, inner.calls, "nothing sent")
}
