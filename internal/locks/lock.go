package locks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/database"
)

// errVanished is the cause of a loss where the session still answers but no
// longer holds the lock.
var errVanished = errors.New("lock no longer held by its session")

// errAbandoned is the cause of a loss the holder asked for (Abandon).
var errAbandoned = errors.New("lock abandoned: its holder did not return in time")

// Lock is a held advisory lock and the dedicated session that holds it. Its
// methods are safe for concurrent use.
type Lock struct {
	locker *Locker
	key    int64
	pid    int
	logger *slog.Logger

	// mu serializes every use of conn: WithTx, a Pipe with transactions in
	// flight, the self-check and Release.
	mu   sync.Mutex
	conn *pgx.Conn
	// prepared are the statements a Pipe prepared on conn, by SQL.
	prepared map[string]*pgconn.StatementDescription

	// ctx is done once the lock is lost or released; its cause is what Err
	// returns. It is only cancelled with mu held, so the first cause wins.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// deadline is when, by this process's monotonic clock, the holder stops
	// trusting its lease (leases only).
	deadlineMu sync.Mutex
	deadline   time.Time
	// expiring is set once Check started losing the lock.
	expiring atomic.Bool
	// abandoned is set by Abandon: Check refuses at once, whatever mu.
	abandoned atomic.Bool

	// wg counts the self-check and lease goroutines.
	wg sync.WaitGroup
}

// newLock wraps a session that was granted key; pid is the session's
// server pid, and start when the try that took the lock began (its lease's
// clock starts there).
func (l *Locker) newLock(conn *pgx.Conn, key int64, pid int, start time.Time) *Lock {
	ctx, cancel := context.WithCancelCause(context.Background())
	lk := &Lock{
		locker: l,
		key:    key,
		pid:    pid,
		logger: l.logger,
		conn:   conn,
		ctx:    ctx,
		cancel: cancel,
	}
	lk.wg.Add(1)
	go lk.checkLoop(l.checkInterval, l.checkTimeout)
	if l.leaseTTL > 0 {
		lk.deadline = start.Add(leaseValidity(l.leaseTTL))
		lk.wg.Add(1)
		go lk.leaseLoop(l.leaseTTL)
	}
	return lk
}

// Key returns the lock's key.
func (lk *Lock) Key() int64 { return lk.key }

// PID returns the backend pid of the session holding the lock, as shown in
// pg_locks and pg_stat_activity (the server's, also behind a pooler).
func (lk *Lock) PID() int { return lk.pid }

// Done returns a channel closed when the lock is known to be lost or has been
// released.
func (lk *Lock) Done() <-chan struct{} { return lk.ctx.Done() }

// Err returns nil while the lock is held, an error wrapping ErrLockLost with
// its cause once it is known lost, and ErrReleased after Release.
func (lk *Lock) Err() error { return context.Cause(lk.ctx) }

// Context returns a context derived from parent that is also cancelled as
// soon as the lock is lost or released, with the lock's Err as its cause
// (see context.Cause). Call the CancelFunc when done with it.
func (lk *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	if err := lk.Err(); err != nil {
		cancel(err)
		return ctx, func() {}
	}
	stop := context.AfterFunc(lk.ctx, func() { cancel(context.Cause(lk.ctx)) })
	prev, _ := parent.Value(guardKey{}).(*guard)
	ctx = context.WithValue(ctx, guardKey{}, &guard{lk: lk, next: prev})
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// WithTx runs fn in one transaction on the lock's session, after checking in
// that transaction that the session still holds the lock, and commits if fn
// returns nil. If the lock is lost, before or during the call, it returns an
// error wrapping ErrLockLost and nothing fn wrote is committed; fn's own
// errors are returned as they are. A cancelled ctx rolls back without ending
// the session, so the lock stays held. Calls are serialized with each other,
// with the self-check and with Release.
func (lk *Lock) WithTx(ctx context.Context, fn func(pgx.Tx) error) error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if err := lk.Err(); err != nil {
		return fmt.Errorf("locks: with tx: %w", err)
	}
	if lk.abandoned.Load() {
		lk.lose(errAbandoned)
		return fmt.Errorf("locks: with tx: %w", lk.Err())
	}

	err := pgx.BeginFunc(ctx, txBeginner{lk.conn}, func(tx pgx.Tx) error {
		held, err := verify(ctx, tx, lk.key)
		if err != nil {
			return fmt.Errorf("verify lock: %w", err)
		}
		if !held {
			return errVanished
		}
		return fn(tx)
	})
	return lk.settle(err, "with tx")
}

const notHeldText = "syncer: this session no longer holds its advisory lock"

// isNotHeld reports whether err is the failure of pipeHeadSQL for a lock the
// session no longer holds.
func isNotHeld(err error) bool {
	var pgErr *pgconn.PgError
	// 22P02: invalid_text_representation, the failed cast.
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, notHeldText)
}

// settle turns a transaction's error into the lock's state: a lock no
// longer held, or a session pgx closed, is a lost lock; other errors are
// the caller's own and are returned as they are. The caller holds mu.
func (lk *Lock) settle(err error, op string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errVanished):
		lk.lose(errVanished)
	case lk.conn.IsClosed():
		// pgx closes a connection it can no longer trust (network error,
		// terminated backend, failed commit): the session and its lock are
		// gone or going.
		lk.lose(err)
	default:
		return err
	}
	return fmt.Errorf("locks: %s: %w", op, lk.Err())
}

// Release unlocks the lock and gives its session back to the Locker for its
// next try (or closes it, when the unlock failed). It runs even if ctx is
// already cancelled, bounded by ReleaseTimeout, and waits for a WithTx in
// progress to finish. Releasing a lock that is already released or lost does
// nothing and returns nil. An error wrapping ErrLockLost means the session no
// longer held the lock when Release ran.
func (lk *Lock) Release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	defer lk.wg.Wait()

	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.ctx.Err() != nil {
		return nil
	}
	lk.cancel(ErrReleased)

	var unlocked bool
	err := lk.conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", lk.key).Scan(&unlocked)
	switch {
	case err != nil:
		// Closing ends the session, which frees the lock even though the
		// unlock failed.
		closeConn(lk.conn)
		return fmt.Errorf("locks: release: %w", err)
	case !unlocked:
		closeConn(lk.conn)
		return fmt.Errorf("locks: release: %w: %w", ErrLockLost, errVanished)
	}
	// The session holds no lock now: the next try reuses it.
	lk.locker.putIdle(lk.conn)
	return nil
}

// Abandon gives the lock up without waiting for the goroutine that holds
// it, which may never return (a program that spins, a call that ignores
// its context). At once, Check (so CheckContext, before every request to a
// third party) and WithTx refuse with ErrLockLost, and the lease is no
// longer renewed; the session is closed as soon as no WithTx is under way
// on it, which frees the lock on the server. Should a WithTx never return,
// the lease runs out and the next try of any daemon ends the session
// ("Leases" in the package documentation). Abandoning a lock released or
// lost does nothing.
func (lk *Lock) Abandon() {
	if lk.abandoned.Swap(true) || lk.Err() != nil {
		return
	}
	go lk.expire(errAbandoned)
}

// checkLoop verifies the lock every interval until it is lost or released.
func (lk *Lock) checkLoop(interval, timeout time.Duration) {
	defer lk.wg.Done()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-lk.ctx.Done():
			return
		case <-ticker.C:
		}
		// A WithTx in progress checks the lock itself, and Release is
		// ending it: skip this round rather than queue behind them.
		if !lk.mu.TryLock() {
			continue
		}
		lk.check(timeout)
		lk.mu.Unlock()
	}
}

// check runs one self-check; the caller holds mu.
func (lk *Lock) check(timeout time.Duration) {
	if lk.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	held, err := verify(ctx, lk.conn, lk.key)
	switch {
	case err != nil:
		// Unable to prove the lock is held counts as lost; lose closes the
		// session so the server frees the lock if it still has it.
		lk.lose(fmt.Errorf("self-check: %w", err))
	case !held:
		lk.lose(errVanished)
	}
}

// lose marks the lock lost with cause, logs why and closes the session. The
// caller holds mu.
func (lk *Lock) lose(cause error) {
	if lk.ctx.Err() != nil {
		return
	}
	attrs := []any{slog.Int64("key", lk.key), slog.Int("pid", lk.pid), slog.String("error", cause.Error())}
	switch {
	case errors.Is(cause, errLeaseExpired), errors.Is(cause, errLeaseTaken):
		lk.logger.Warn("locks: lock lost: its lease was not renewed in time; nothing more is sent on its behalf, "+
			"and a waiting daemon may have ended its session", attrs...)
	case errors.Is(cause, errAbandoned):
		lk.logger.Warn("locks: lock given up: the job holding it did not return in time; its session is closed "+
			"so that another job can take the lock, and nothing more is sent or marked on its behalf", attrs...)
	case errors.Is(cause, errVanished):
		lk.logger.Warn("locks: lock lost: it vanished while its connection still answers; "+
			"a transaction-mode connection pooler (such as PgBouncer in transaction mode) breaks session advisory locks, "+
			"connect directly or in session mode", attrs...)
	default:
		lk.logger.Warn("locks: lock lost: its connection failed; the server frees the lock when the session ends", attrs...)
	}
	lk.cancel(fmt.Errorf("%w: %w", ErrLockLost, cause))
	closeConn(lk.conn)
}

// verify reports whether the session behind q holds the advisory lock key.
func verify(ctx context.Context, q database.Querier, key int64) (bool, error) {
	classid, objid := pgLocksIDs(key)
	var held bool
	err := q.QueryRow(ctx, verifySQL, classid, objid).Scan(&held)
	return held, err
}

const verifySQL = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE ` + heldWhere + `)`

// heldWhere is the session's own granted hold of the advisory lock whose
// pg_locks ids are $1 and $2.
const heldWhere = `locktype = 'advisory' AND pid = pg_backend_pid() AND granted
	AND classid = $1 AND objid = $2 AND objsubid = 1`

// txBeginner hands pgx.BeginFunc transactions whose end does not kill the
// session when the caller's context is cancelled: pgx closes the connection
// when a ROLLBACK or COMMIT fails, and a lock's connection closing is a lost
// lock.
type txBeginner struct{ conn *pgx.Conn }

func (b txBeginner) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := b.conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return cleanupTx{tx}, nil
}

type cleanupTx struct{ pgx.Tx }

// Rollback runs even after ctx is cancelled.
func (t cleanupTx) Rollback(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return t.Tx.Rollback(ctx)
}

// Commit does not start a COMMIT for a cancelled ctx: the caller gave up, so
// the deferred Rollback ends the transaction instead.
func (t cleanupTx) Commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return t.Tx.Commit(ctx)
}
