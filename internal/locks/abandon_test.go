package locks_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/locks"
)

// An abandoned lock refuses at once (no request goes on its behalf, nothing
// is marked), and its session ends, so another daemon takes it without
// waiting for its lease.
func TestAbandonFreesTheLockAtOnce(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	b := leaseSetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	lctx, cancel := lk.Context(ctx)
	defer cancel()

	lk.Abandon()
	require.ErrorIs(t, locks.CheckContext(lctx), locks.ErrLockLost, "refused at once")
	waitDone(t, lk, time.Second)
	require.ErrorIs(t, lk.WithTx(ctx, func(pgx.Tx) error { return nil }), locks.ErrLockLost)
	other := b.leasedLocker(t, ttl)
	lk2, err := other.TryAcquire(ctx, b.key)
	require.NoError(t, err, "the session ended: the lock is free well before its lease runs out")
	require.NoError(t, lk2.Release(ctx))
	lk.Abandon() // twice: nothing
}

// A lock abandoned while a transaction on its session never returns is
// taken over once its lease runs out (it is no longer renewed), and that
// transaction commits nothing.
func TestAbandonWhileTransactionHangs(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	b := leaseSetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	_, err := b.pool.Exec(ctx, "CREATE TABLE marks (id int PRIMARY KEY)")
	require.NoError(t, err)
	inside, release := make(chan struct{}), make(chan struct{})
	txErr := make(chan error, 1)
	go func() {
		txErr <- lk.WithTx(ctx, func(tx pgx.Tx) error {
			close(inside)
			<-release
			return insertMark(1)(tx)
		})
	}()
	<-inside
	lk.Abandon()
	require.ErrorIs(t, lk.Check(), locks.ErrLockLost, "refused at once, whatever the session does")

	other := b.leasedLocker(t, ttl)
	start := time.Now()
	var lk2 *locks.Lock
	waitForTakeover := time.Now().Add(3 * ttl)
	for {
		lk2, err = other.TryAcquire(ctx, b.key)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, locks.ErrLockBusy)
		require.True(t, time.Now().Before(waitForTakeover), "not taken over within %s", 3*ttl)
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("taken over after %s", time.Since(start))
	close(release)
	require.ErrorIs(t, <-txErr, locks.ErrLockLost)
	require.Equal(t, 0, b.markCount(t), "nothing committed by the abandoned holder")
	require.NoError(t, lk2.Release(ctx))
}
