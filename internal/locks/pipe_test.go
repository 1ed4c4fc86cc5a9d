package locks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/locks"
)

func queueMark(id int) func(*pgx.Batch) error {
	return func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) VALUES ($1)", id)
		return nil
	}
}

// pipeSetup returns the bundle set up with cfg, the lock its locker took
// and a new pipe on that lock.
func pipeSetup(t *testing.T, cfg *locks.Config) (*testBundle, *locks.Lock, *locks.Pipe) {
	t.Helper()
	b := setup(t, cfg)
	lk := b.tryAcquire(t, b.locker)
	return b, lk, lk.NewPipe()
}

// withBatch sends one transaction on a new pipe and waits for it.
func withBatch(ctx context.Context, lk *locks.Lock, queue func(*pgx.Batch) error) error {
	p := lk.NewPipe()
	if err := p.Send(ctx, queue); err != nil {
		return err
	}
	return p.Receive()
}

func TestPipeCommitsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	lk := b.tryAcquire(t, b.locker)

	var got int
	require.NoError(t, withBatch(ctx, lk, func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) VALUES (1), (2)")
		qb.Queue("SELECT count(*) FROM marks").QueryRow(func(r pgx.Row) error { return r.Scan(&got) })
		return nil
	}))
	require.Equal(t, 2, got, "callbacks see the batch's own writes")
	require.Equal(t, 2, b.markCount(t))

	// A failing statement rolls back the ones before it and keeps the lock.
	err := withBatch(ctx, lk, func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) VALUES (3)")
		qb.Queue("INSERT INTO marks (id) VALUES (1)") // duplicate key
		return nil
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.NoError(t, lk.Err())
	require.Equal(t, 2, b.markCount(t))

	// A callback runs after the commit: its error is returned and undoes
	// nothing. An error while queueing sends nothing.
	errBoom := errors.New("boom")
	err = withBatch(ctx, lk, func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) VALUES (4)").Exec(func(pgconn.CommandTag) error { return errBoom })
		return nil
	})
	require.ErrorIs(t, err, errBoom)
	require.Equal(t, 3, b.markCount(t))
	require.ErrorIs(t, withBatch(ctx, lk, func(*pgx.Batch) error { return errBoom }), errBoom)
	require.NoError(t, lk.Err())
	require.Equal(t, 3, b.markCount(t))

	// The session is clean afterwards: the next batch commits, in one
	// transaction: its statements see each other and no open transaction
	// is left behind.
	var inTx bool
	require.NoError(t, withBatch(ctx, lk, func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) VALUES (5)")
		qb.Queue("SELECT now() = statement_timestamp() FROM marks WHERE id = 5").QueryRow(func(r pgx.Row) error { return r.Scan(&inTx) })
		return nil
	}))
	require.False(t, inTx, "both statements ran in one transaction (its now() is the first statement's)")
	require.Equal(t, 4, b.markCount(t))
	require.NoError(t, lk.WithTx(ctx, func(tx pgx.Tx) error { return nil }), "the session is idle, not in a transaction")
}

// Transactions sent before the ones ahead of them are answered run in
// order, and one whose predecessor failed commits nothing.
func TestPipeFencesOnTheTransactionBefore(t *testing.T) {
	t.Parallel()
	b, lk, p := pipeSetup(t, nil)
	ctx := context.Background()

	// Three in flight; the second sees the first's write, the third the
	// second's.
	counts := make([]int, 3)
	for i := range 3 {
		require.NoError(t, p.Send(ctx, func(qb *pgx.Batch) error {
			qb.Queue("INSERT INTO marks (id) VALUES ($1)", i+1)
			qb.Queue("SELECT count(*) FROM marks").QueryRow(func(r pgx.Row) error { return r.Scan(&counts[i]) })
			return nil
		}))
	}
	require.Equal(t, 3, p.InFlight())
	for range 3 {
		require.NoError(t, p.Receive())
	}
	require.Equal(t, []int{1, 2, 3}, counts)

	// The first fails; the two sent behind it before its answer commit
	// nothing, though their own statements would have succeeded.
	require.NoError(t, p.Send(ctx, func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) VALUES (1)") // duplicate key
		return nil
	}))
	require.NoError(t, p.Send(ctx, queueMark(10)))
	require.NoError(t, p.Send(ctx, queueMark(11)))
	var pgErr *pgconn.PgError
	err := p.Receive()
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.ErrorIs(t, p.Receive(), locks.ErrEarlierFailed)
	require.ErrorIs(t, p.Receive(), locks.ErrEarlierFailed)
	require.NoError(t, lk.Err(), "a failed transaction keeps the lock")
	require.Equal(t, 3, b.markCount(t))

	// Once everything is received, the next transaction stands alone.
	require.NoError(t, p.Send(ctx, queueMark(12)))
	require.NoError(t, p.Receive())
	require.Equal(t, 4, b.markCount(t))
	require.NoError(t, lk.WithTx(ctx, func(tx pgx.Tx) error { return nil }), "the session left pipeline mode")
}

// A chained transaction is fenced like any other, and only skips the
// lock's check: sent after the lock vanished it commits, and a checked
// one behind it does not.
func TestPipeChainedIsFencedAndUnchecked(t *testing.T) {
	t.Parallel()
	b, lk, p := pipeSetup(t, &locks.Config{CheckInterval: time.Hour})
	ctx := context.Background()

	// Behind a failed transaction, a chained one does nothing.
	require.NoError(t, p.Send(ctx, queueMark(1)))
	require.NoError(t, p.Receive())
	require.NoError(t, p.Send(ctx, queueMark(1))) // duplicate key
	require.NoError(t, p.SendChained(ctx, queueMark(2)))
	require.Error(t, p.Receive())
	require.ErrorIs(t, p.Receive(), locks.ErrEarlierFailed)
	require.Equal(t, 1, b.markCount(t))

	// Chained transactions in flight see each other's writes in order.
	counts := make([]int, 2)
	for i := range 2 {
		require.NoError(t, p.SendChained(ctx, func(qb *pgx.Batch) error {
			qb.Queue("INSERT INTO marks (id) VALUES ($1)", 10+i)
			qb.Queue("SELECT count(*) FROM marks").QueryRow(func(r pgx.Row) error { return r.Scan(&counts[i]) })
			return nil
		}))
	}
	require.NoError(t, p.Receive())
	require.NoError(t, p.Receive())
	require.Equal(t, []int{2, 3}, counts)

	// The lock vanishes: a chained transaction still commits (what it
	// writes is harmless after a loss), a checked one does not.
	require.NoError(t, locks.Vanish(lk))
	require.NoError(t, p.SendChained(ctx, queueMark(20)))
	require.NoError(t, p.Receive())
	require.Equal(t, 4, b.markCount(t))
	require.ErrorIs(t, withBatch(ctx, lk, queueMark(21)), locks.ErrLockLost)
	require.Equal(t, 4, b.markCount(t))
}

// A statement the session has not prepared, sent while others are in
// flight, waits for them; their answers still come in order.
func TestPipePreparesBehindWhatIsInFlight(t *testing.T) {
	t.Parallel()
	b, _, p := pipeSetup(t, nil)
	ctx := context.Background()

	var first, second int64
	require.NoError(t, p.Send(ctx, func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) VALUES (1) RETURNING id").QueryRow(func(r pgx.Row) error { return r.Scan(&first) })
		return nil
	}))
	require.NoError(t, p.Send(ctx, func(qb *pgx.Batch) error {
		qb.Queue("INSERT INTO marks (id) SELECT 2 RETURNING id * 10").QueryRow(func(r pgx.Row) error { return r.Scan(&second) })
		return nil
	}))
	require.NoError(t, p.Receive())
	require.Equal(t, int64(1), first)
	require.Zero(t, second, "the second transaction's callback runs when it is received")
	require.NoError(t, p.Receive())
	require.Equal(t, int64(20), second)
	require.Equal(t, 2, b.markCount(t))
}

func TestPipeNoticesLoss(t *testing.T) {
	t.Parallel()
	t.Run("vanished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &locks.Config{CheckInterval: time.Hour})
		ctx := context.Background()
		lk := b.tryAcquire(t, b.locker)
		require.NoError(t, locks.Vanish(lk))
		require.ErrorIs(t, withBatch(ctx, lk, queueMark(1)), locks.ErrLockLost)
		waitDone(t, lk, time.Second)
		require.Equal(t, 0, b.markCount(t), "a batch behind a failed check commits nothing")
	})
	t.Run("terminated", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &locks.Config{CheckInterval: time.Hour})
		ctx := context.Background()
		lk := b.tryAcquire(t, b.locker)
		b.terminate(t, lk.PID())
		require.ErrorIs(t, withBatch(ctx, lk, queueMark(1)), locks.ErrLockLost)
		waitDone(t, lk, time.Second)
		require.Equal(t, 0, b.markCount(t))
	})
	t.Run("terminated with two in flight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &locks.Config{CheckInterval: time.Hour})
		ctx := context.Background()
		lk := b.tryAcquire(t, b.locker)
		sleep := func(s float64) func(*pgx.Batch) error {
			return func(qb *pgx.Batch) error {
				qb.Queue("SELECT pg_sleep($1)", s)
				return nil
			}
		}
		// Prepared first: a new statement would wait for what is in
		// flight.
		require.NoError(t, withBatch(ctx, lk, sleep(0)))
		require.NoError(t, withBatch(ctx, lk, func(qb *pgx.Batch) error {
			qb.Queue("INSERT INTO marks (id) VALUES ($1)", 0)
			qb.Queue("DELETE FROM marks")
			return nil
		}))
		p := lk.NewPipe()
		require.NoError(t, p.Send(ctx, sleep(0.5)))
		require.NoError(t, p.Send(ctx, queueMark(1)))
		require.Equal(t, 2, p.InFlight())
		b.terminate(t, lk.PID())
		// The first passed its check before the holder session went: it
		// runs on its own connection, and the lock cannot be granted to
		// another before it ends (the fence).
		_ = p.Receive()
		require.ErrorIs(t, p.Receive(), locks.ErrLockLost)
		waitDone(t, lk, time.Second)
		require.Equal(t, 0, b.markCount(t))
		require.NoError(t, lk.Release(ctx), "Release of a lost lock returns at once")
	})
	t.Run("an argument that cannot be encoded", func(t *testing.T) {
		t.Parallel()
		b, lk, p := pipeSetup(t, &locks.Config{CheckInterval: time.Hour})
		ctx := context.Background()
		require.NoError(t, p.Send(ctx, queueMark(1)))
		err := p.Send(ctx, func(qb *pgx.Batch) error {
			qb.Queue("INSERT INTO marks (id) VALUES ($1)", 2)
			qb.Queue("INSERT INTO marks (id) VALUES ($1)", make(chan int))
			return nil
		})
		require.ErrorIs(t, err, locks.ErrLockLost, "half a transaction is never sent: the session goes")
		// The one in flight may have committed before the session went;
		// its answer is lost with it.
		require.ErrorIs(t, p.Receive(), locks.ErrLockLost)
		waitDone(t, lk, time.Second)
		var second int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM marks WHERE id = 2").Scan(&second))
		require.Zero(t, second)
	})
	t.Run("past its deadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &locks.Config{CheckInterval: time.Hour})
		lk := b.tryAcquire(t, b.locker)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := withBatch(ctx, lk, func(qb *pgx.Batch) error {
			qb.Queue("SELECT pg_sleep(5)")
			qb.Queue("INSERT INTO marks (id) VALUES (1)")
			return nil
		})
		require.Error(t, err, "the transaction past the deadline ends with its connection")
		require.NoError(t, lk.Err(), "its lock is kept")
		require.Equal(t, 0, b.markCount(t))
		require.NoError(t, withBatch(context.Background(), lk, queueMark(2)), "the next runs on another connection")
		require.Equal(t, 1, b.markCount(t))
	})
}
