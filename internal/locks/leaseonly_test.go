package locks_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/locks"
)

// leaseOnlySetup is leaseSetup with Lockers of leases alone, and a marks
// table for their transactions.
func leaseOnlySetup(t *testing.T, ttl time.Duration) *testBundle {
	t.Helper()
	b := migratedSetup(t)
	b.connConfig.RuntimeParams["application_name"] = "lease-only test"
	b.locker = b.leaseOnlyLocker(t, ttl)
	_, err := b.pool.Exec(context.Background(), "CREATE TABLE marks (id int PRIMARY KEY)")
	require.NoError(t, err)
	return b
}

func (b *testBundle) leaseOnlyLocker(t *testing.T, ttl time.Duration) *locks.Locker {
	t.Helper()
	locker, err := locks.New(b.connConfig, &locks.Config{LeasesOnly: true, LeaseTTL: ttl})
	require.NoError(t, err)
	t.Cleanup(locker.Close)
	return locker
}

// advisoryHeld counts the sessions holding an advisory lock of the
// test's key: a lock of leases alone is held by none.
func (b *testBundle) advisoryHeld(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = $2`,
		uint32(uint64(b.key)>>32), uint32(uint64(b.key))).Scan(&n))
	return n
}

// Take, busy, renew, release: a lock of leases alone is its row, renewed
// while held, and no session holds anything for it.
func TestLeaseOnlyTakeBusyRenewRelease(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	b := leaseOnlySetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	_, err := b.locker.TryAcquire(ctx, b.key)
	require.ErrorIs(t, err, locks.ErrLockBusy, "a key this Locker holds is busy for it")
	other := b.leaseOnlyLocker(t, ttl)
	require.Zero(t, b.advisoryHeld(t))

	time.Sleep(3 * ttl)
	require.NoError(t, lk.Check(), "a lease renewed every fifth of its TTL never runs out")
	_, err = other.TryAcquire(ctx, b.key)
	require.ErrorIs(t, err, locks.ErrLockBusy)
	live, err := locks.HeldLive(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.True(t, live)
	h, held, err := locks.HolderOf(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.True(t, held)
	require.Equal(t, "lease-only test", h.ApplicationName)
	var left time.Duration
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT expires_at - clock_timestamp() FROM syncer_lock_leases WHERE key = $1`, b.key).Scan(&left))
	require.Greater(t, left, ttl/2)

	require.NoError(t, lk.WithTx(ctx, insertMark(1)))
	require.Equal(t, 1, b.markCount(t))

	require.NoError(t, lk.Release(ctx))
	require.ErrorIs(t, lk.Err(), locks.ErrReleased)
	live, err = locks.HeldLive(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.False(t, live)
	_, held, err = locks.HolderOf(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.False(t, held)
	lk2, err := other.TryAcquire(ctx, b.key)
	require.NoError(t, err, "a released lease is free at once")
	require.NoError(t, lk2.Release(ctx))
}

// A lease that ran out is taken over; the former holder's fence refuses
// its transactions (nothing committed), it loses the lock at its next
// renewal, and its release deletes nothing of the new holder's.
func TestLeaseOnlyExpiryTakeoverFencesTheFormerHolder(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	b := leaseOnlySetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	require.NoError(t, lk.WithTx(ctx, insertMark(1)))

	_, err := b.pool.Exec(ctx, `UPDATE syncer_lock_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE key = $1`, b.key)
	require.NoError(t, err)
	live, err := locks.HeldLive(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.False(t, live, "a lease that ran out does not count")
	other := b.leaseOnlyLocker(t, ttl)
	lk2, err := other.TryAcquire(ctx, b.key)
	require.NoError(t, err, "a lease that ran out is taken over")
	defer func() { require.NoError(t, lk2.Release(ctx)) }()

	require.ErrorIs(t, lk.WithTx(ctx, insertMark(2)), locks.ErrLockLost)
	require.Equal(t, 1, b.markCount(t), "the former holder commits nothing")
	require.ErrorIs(t, lk.Check(), locks.ErrLockLost)
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, lk2.WithTx(ctx, insertMark(3)), "the former holder's release left the new lease alone")
	require.NoError(t, lk2.Check())
}

// The former holder's renewal finds the row someone else's: the lock is
// lost without any transaction of it.
func TestLeaseOnlyRenewalNoticesTakeover(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	b := leaseOnlySetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	_, err := b.pool.Exec(ctx, `UPDATE syncer_lock_leases SET holder = 'someone else' WHERE key = $1`, b.key)
	require.NoError(t, err)
	waitDone(t, lk, 2*ttl)
	require.ErrorIs(t, lk.Err(), locks.ErrLockLost)
}

// No taker writes its token while a transaction of the former holder
// holds the row FOR SHARE, even once the lease ran out: the try is busy,
// and the former holder's transaction, its second fence failing, commits
// nothing. A transaction frozen idle is ended by its own idle timeout.
func TestLeaseOnlyNotTakenWhileFormerHoldersTransactionRuns(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	b := leaseOnlySetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	other := b.leaseOnlyLocker(t, ttl)

	inTx, goOn := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- lk.WithTx(ctx, func(tx pgx.Tx) error {
			close(inTx)
			// Busy, not idle: the renewal waits for this transaction, so
			// the lease runs out under it.
			for {
				select {
				case <-goOn:
					return insertMark(1)(tx)
				default:
				}
				if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.05)"); err != nil {
					return err
				}
			}
		})
	}()
	<-inTx
	require.Eventually(t, func() bool {
		var ran bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT expires_at < clock_timestamp() FROM syncer_lock_leases WHERE key = $1`, b.key).Scan(&ran))
		return ran
	}, 3*ttl, 20*time.Millisecond)
	live, err := locks.HeldLive(ctx, b.pool, b.key)
	require.NoError(t, err)
	require.False(t, live)
	_, err = other.TryAcquire(ctx, b.key)
	require.ErrorIs(t, err, locks.ErrLockBusy, "the former holder's transaction keeps its row")
	close(goOn)
	require.ErrorIs(t, <-done, locks.ErrLockLost, "its second fence finds the lease run out")
	require.Zero(t, b.markCount(t))
	lk2, err := other.TryAcquire(ctx, b.key)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk2.Release(ctx) })

	// Frozen inside a transaction: idle past ttl/2, the server ends it.
	start := time.Now()
	err = lk2.WithTx(ctx, func(tx pgx.Tx) error {
		time.Sleep(ttl/2 + 500*time.Millisecond)
		return insertMark(2)(tx)
	})
	require.Error(t, err, "a transaction idle past its timeout is ended by the server")
	require.Less(t, time.Since(start), ttl+time.Second)
	require.Zero(t, b.markCount(t))
}

// A holder of leases alone frozen with SIGSTOP loses its lock to a waiter
// about one TTL after it froze, and when it wakes its first check fails.
func TestLeaseOnlyFrozenHolder(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	b := leaseOnlySetup(t, ttl)
	lk := b.frozenHolderLoses(t, ttl, b.leaseOnlyLocker(t, ttl), envLeasesOnly+"=1")
	require.NoError(t, lk.Check())
	require.NoError(t, lk.WithTx(context.Background(), insertMark(1)), "the woken holder's release left the new lease alone")
}

// A lease row a session's lock wrote (a daemon with a whole session) is
// live for a Locker of leases alone while that session holds the lock,
// and free at once after its release, though its lease has not run out:
// a daemon restarted without SYNCER_DIRECT_URL does not wait it out.
func TestLeaseOnlyAfterASessionsLock(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	b := leaseOnlySetup(t, ttl)
	ctx := context.Background()
	session := b.leasedLocker(t, ttl)
	lk, err := session.TryAcquire(ctx, b.key)
	require.NoError(t, err)
	_, err = b.locker.TryAcquire(ctx, b.key)
	require.ErrorIs(t, err, locks.ErrLockBusy, "held by the session's advisory lock and its lease")
	require.NoError(t, lk.Release(ctx))
	lk2, err := b.locker.TryAcquire(ctx, b.key)
	require.NoError(t, err, "the session's lease row is free once it released the lock")
	require.NoError(t, lk2.WithTx(ctx, insertMark(1)))
	require.NoError(t, lk2.Release(ctx))
}

// A Locker with a whole session honours a live lease of a Locker of leases
// alone: its try is busy, without waiting, and takes the lock once the
// lease is released.
func TestSessionLockHonoursALeaseAlone(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	b := leaseOnlySetup(t, ttl)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)
	session := b.leasedLocker(t, ttl)
	_, err := session.TryAcquire(ctx, b.key)
	require.ErrorIs(t, err, locks.ErrLockBusy, "a live lease alone holds the key")
	require.Zero(t, b.advisoryHeld(t), "the busy try gave its advisory lock back")
	require.NoError(t, lk.WithTx(ctx, insertMark(1)))
	require.NoError(t, lk.Release(ctx))
	lk2, err := session.TryAcquire(ctx, b.key)
	require.NoError(t, err)
	require.NoError(t, lk2.WithTx(ctx, insertMark(2)))
	require.NoError(t, lk2.Release(ctx))
}
