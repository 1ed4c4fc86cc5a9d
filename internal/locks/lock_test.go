package locks_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/locks"
)

func TestWithTxCommitsAndReturnsFnError(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)

	require.NoError(t, lk.WithTx(ctx, insertMark(1)))
	errBoom := errors.New("boom")
	err := lk.WithTx(ctx, func(tx pgx.Tx) error {
		if err := insertMark(2)(tx); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.NoError(t, lk.Err(), "an error from fn does not lose the lock")
	require.Equal(t, 1, b.markCount(t))
}

func TestWithTxCancelKeepsLock(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	lk := b.tryAcquire(t, b.locker)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := lk.WithTx(ctx, func(tx pgx.Tx) error {
		if err := insertMark(1)(tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_sleep(30)")
		return err
	})
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, lk.Err(), "cancelling a statement must not end the lock's session")
	require.Equal(t, 0, b.markCount(t))

	require.NoError(t, lk.WithTx(context.Background(), insertMark(2)))
	require.NoError(t, lk.Release(context.Background()))
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	lk := b.tryAcquire(t, b.locker)

	ctx, cancel := context.WithCancel(context.Background())
	lockCtx, lockCancel := lk.Context(context.Background())
	defer lockCancel()
	cancel()
	require.NoError(t, lk.Release(ctx), "release runs even with a cancelled context")
	require.NoError(t, lk.Release(ctx))
	require.ErrorIs(t, lk.Err(), locks.ErrReleased)
	<-lk.Done()
	<-lockCtx.Done()
	require.ErrorIs(t, context.Cause(lockCtx), locks.ErrReleased)
	require.ErrorIs(t, lk.WithTx(context.Background(), insertMark(1)), locks.ErrReleased)
	require.Equal(t, 0, b.markCount(t))
}

func TestLossByTerminatedBackend(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	lockCtx, lockCancel := lk.Context(ctx)
	defer lockCancel()

	start := time.Now()
	b.terminate(t, lk.PID())
	waitDone(t, lk, 2*checkInterval+time.Second)
	t.Logf("loss noticed after %s", time.Since(start))

	require.ErrorIs(t, lk.Err(), locks.ErrLockLost)
	select {
	case <-lockCtx.Done():
	case <-time.After(time.Second):
		t.Fatal("lock context not cancelled")
	}
	require.ErrorIs(t, context.Cause(lockCtx), locks.ErrLockLost)

	called := false
	err := lk.WithTx(ctx, func(tx pgx.Tx) error {
		called = true
		return insertMark(1)(tx)
	})
	require.ErrorIs(t, err, locks.ErrLockLost)
	require.False(t, called)
	require.Equal(t, 0, b.markCount(t))
	require.NoError(t, lk.Release(ctx), "releasing a lost lock does nothing")

	// The server frees the lock as the terminated backend exits.
	other := b.newLocker(t)
	require.Eventually(t, func() bool {
		lk2, err := other.TryAcquire(ctx, b.key)
		if err != nil {
			return false
		}
		require.NoError(t, lk2.Release(ctx))
		return true
	}, 5*time.Second, 20*time.Millisecond)
}

func TestLossDuringWithTxCommitsNothing(t *testing.T) {
	t.Parallel()
	// No self-check during the test: WithTx alone must notice.
	b := setup(t, &locks.Config{CheckInterval: time.Hour})
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)

	err := lk.WithTx(ctx, func(tx pgx.Tx) error {
		if err := insertMark(1)(tx); err != nil {
			return err
		}
		b.terminate(t, lk.PID())
		return nil // the COMMIT meets a dead session
	})
	require.ErrorIs(t, err, locks.ErrLockLost)
	require.ErrorIs(t, lk.Err(), locks.ErrLockLost)
	waitDone(t, lk, time.Second)
	require.Equal(t, 0, b.markCount(t))
	require.ErrorIs(t, lk.WithTx(ctx, insertMark(2)), locks.ErrLockLost)
	require.Equal(t, 0, b.markCount(t))
}

func TestLossNoticedByWithTxBeforeSelfCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, &locks.Config{CheckInterval: time.Hour})
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)

	b.terminate(t, lk.PID())
	require.ErrorIs(t, lk.WithTx(ctx, insertMark(1)), locks.ErrLockLost)
	waitDone(t, lk, time.Second)
	require.Equal(t, 0, b.markCount(t))
}

// A lock that vanishes while the connection answers is what a
// transaction-mode pooler produces; unlocking on the session simulates it.
func TestLossByVanishedLock(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		checkInterval time.Duration
	}{
		{"self-check notices", checkInterval},
		{"WithTx notices", time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs dbtest.Buffer
			b := setup(t, &locks.Config{
				CheckInterval: tt.checkInterval,
				Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
			})
			ctx := context.Background()
			lk := b.tryAcquire(t, b.locker)

			require.NoError(t, locks.Vanish(lk))
			if tt.checkInterval == time.Hour {
				require.ErrorIs(t, lk.WithTx(ctx, insertMark(1)), locks.ErrLockLost)
			}
			waitDone(t, lk, 2*checkInterval+time.Second)
			require.ErrorIs(t, lk.Err(), locks.ErrLockLost)
			require.ErrorIs(t, lk.WithTx(ctx, insertMark(2)), locks.ErrLockLost)
			require.Equal(t, 0, b.markCount(t))
			require.Contains(t, logs.String(), "PgBouncer in transaction mode")
			require.Equal(t, 1, bytes.Count([]byte(logs.String()), []byte("level=WARN")), "one warning per loss")
		})
	}
}
