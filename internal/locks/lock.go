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
	"github.com/jackc/pgx/v5/pgxpool"
)

// errVanished is the cause of a loss where the session still answers but no
// longer holds the lock.
var errVanished = errors.New("lock no longer held by its session")

// errAbandoned is the cause of a loss the holder asked for (Abandon).
var errAbandoned = errors.New("lock abandoned: its holder did not return in time")

// Lock is a held advisory lock, held by its Locker's holder session. Its
// methods are safe for concurrent use.
type Lock struct {
	locker *Locker
	key    int64
	pid    int
	logger *slog.Logger
	// hconn is the holder session the lock was taken on (nil with leases
	// alone).
	hconn *pgx.Conn
	// token is the lease's holder with leases alone (leaseonly.go).
	token string

	// mu serializes the lock's transactions (WithTx, a Pipe with
	// transactions in flight), its loss and Release.
	mu sync.Mutex
	// conn is the pooled connection of the transaction under way (mu
	// held), nil between them; pc is its pool's handle.
	conn *pgx.Conn
	pc   *pgxpool.Conn
	// prepared are the statements a Pipe prepared, by connection and SQL:
	// a pooled connection keeps them from one use to the next.
	prepared map[*pgx.Conn]map[string]*pgconn.StatementDescription

	// ctx is done once the lock is lost or released; its cause is what Err
	// returns. loseMu orders the losses: the first cause wins.
	loseMu sync.Mutex
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

	// wg counts the lease goroutine.
	wg sync.WaitGroup
}

// newLock wraps key, granted to the holder session conn whose server pid
// is pid. The lease's clock starts before the try (TryAcquire sets the
// deadline from there).
func (l *Locker) newLock(conn *pgx.Conn, key int64, pid int) *Lock {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Lock{
		locker: l,
		key:    key,
		pid:    pid,
		logger: l.logger,
		hconn:  conn,
		ctx:    ctx,
		cancel: cancel,
	}
}

// start starts the lease's renewals, its clock counted from when the try
// that took the lock began.
func (lk *Lock) start(begun time.Time) {
	if ttl := lk.locker.leaseTTL; ttl > 0 {
		lk.deadline = begun.Add(leaseValidity(ttl))
		lk.wg.Add(1)
		go lk.leaseLoop(ttl)
	}
}

// acquire takes a pooled connection for a transaction; the caller holds
// mu.
func (lk *Lock) acquire(ctx context.Context) error {
	pool, err := lk.locker.txPool()
	if err != nil {
		return err
	}
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("locks: acquire a connection: %w", err)
	}
	lk.pc, lk.conn = pc, pc.Conn()
	return nil
}

// putBack gives the transaction's connection back to the pool; the
// caller holds mu.
func (lk *Lock) putBack() {
	if lk.pc != nil {
		lk.pc.Release()
	}
	lk.pc, lk.conn = nil, nil
}

// Key returns the lock's key.
func (lk *Lock) Key() int64 { return lk.key }

// PID returns the backend pid of the session holding the lock (the
// Locker's holder session, which holds all its locks), as shown in
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

// WithTx runs fn in one transaction on a pooled connection, fenced by the
// lock, and commits if fn returns nil. The transaction first takes the
// lock's fence shared (a transaction-level advisory lock) and checks that
// the holder session still holds the lock, and checks again after fn. A
// try takes the fence exclusive before it grants the lock, so no other
// session is granted the lock while this transaction runs, whatever
// happens to the holder session meanwhile: a committed WithTx is a
// transaction no other holder's overlapped. If the lock is lost, before or
// during the call, it returns an error wrapping ErrLockLost and nothing fn
// wrote is committed; fn's own errors are returned as they are. A
// cancelled ctx ends the transaction's connection, not the lock. Calls are
// serialized with each other and with Release.
func (lk *Lock) WithTx(ctx context.Context, fn func(pgx.Tx) error) error {
	lk.mu.Lock()
	defer lk.unlockMu()
	if err := lk.Err(); err != nil {
		return fmt.Errorf("locks: with tx: %w", err)
	}
	if lk.abandoned.Load() {
		lk.lose(errAbandoned)
		return fmt.Errorf("locks: with tx: %w", lk.Err())
	}
	if err := lk.acquire(ctx); err != nil {
		return err
	}
	defer lk.putBack()

	err := pgx.BeginFunc(ctx, txBeginner{lk.conn}, func(tx pgx.Tx) error {
		if err := lk.fence(ctx, tx); err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		// The holder session may have gone while fn ran: its locks are
		// then free on the server, and although no other session can be
		// granted this one before the transaction ends, the caller is told
		// now rather than at its next call.
		return lk.fence(ctx, tx)
	})
	return lk.settle(err, "with tx")
}

// fence takes the lock's fence shared in tx and checks that the holder
// session holds the lock.
func (lk *Lock) fence(ctx context.Context, tx pgx.Tx) error {
	if lk.locker.leasesOnly {
		return lk.leaseFence(ctx, tx)
	}
	classid, objid := pgLocksIDs(lk.key)
	var held bool
	if err := tx.QueryRow(ctx, fenceSQL, classid, objid, fenceKey(lk.key), lk.pid).Scan(&held); err != nil {
		return fmt.Errorf("verify lock: %w", err)
	}
	if !held {
		return errVanished
	}
	return nil
}

// fenceSQL takes the fence ($3) shared, for the transaction, and checks
// that the holder session (server pid $4) holds the lock ($1, $2). The
// fence first: a try that takes it exclusive after this has the lock
// already, so the check then fails.
const fenceSQL = `SELECT CASE WHEN NOT pg_try_advisory_xact_lock_shared($3) THEN false
	ELSE EXISTS (SELECT 1 FROM pg_locks WHERE ` + holderHeldWhere + `) END`

// holderHeldWhere is the holder session's ($4) granted hold of the
// advisory lock whose pg_locks ids are $1 and $2.
const holderHeldWhere = `locktype = 'advisory' AND pid = $4 AND granted
	AND classid = $1 AND objid = $2 AND objsubid = 1`

const notHeldText = "syncer: this session no longer holds its advisory lock"

// isNotHeld reports whether err is the failure of pipeHeadSQL for a lock the
// session no longer holds.
func isNotHeld(err error) bool {
	var pgErr *pgconn.PgError
	// 22P02: invalid_text_representation, the failed cast.
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, notHeldText)
}

// settle turns a transaction's error into the lock's state: a lock the
// holder session no longer holds is a lost lock; other errors, a pooled
// connection that died among them, are the caller's own and are returned
// as they are (the transaction did not commit, or its outcome is unknown,
// as for any client). The caller holds mu.
func (lk *Lock) settle(err error, op string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errVanished):
		lk.lose(errVanished)
	case lk.Err() != nil:
		// Lost meanwhile (abandoned, its lease run out, its holder
		// session gone): the error says so first.
		return fmt.Errorf("locks: %s: %w: %w", op, lk.Err(), err)
	default:
		return err
	}
	return fmt.Errorf("locks: %s: %w", op, lk.Err())
}

// Release unlocks the lock on the holder session. It runs even if ctx is
// already cancelled, bounded by ReleaseTimeout, and waits for a WithTx in
// progress to finish. Releasing a lock that is already released or lost
// does nothing and returns nil. An error wrapping ErrLockLost means the
// holder session no longer held the lock when Release ran.
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
	err := lk.locker.unlock(ctx, lk)
	lk.locker.forget(lk)
	switch {
	case errors.Is(err, errVanished), errors.Is(err, errHolderGone):
		return fmt.Errorf("locks: release: %w: %w", ErrLockLost, err)
	case err != nil:
		// The holder session was ended, which frees the lock.
		return fmt.Errorf("locks: release: %w", err)
	}
	return nil
}

// Abandon gives the lock up without waiting for the goroutine that holds
// it, which may never return (a program that spins, a call that ignores
// its context). At once, Check (so CheckContext, before every request to a
// third party) and WithTx refuse with ErrLockLost, the lease is no longer
// renewed and the lock is unlocked on the holder session. A transaction of
// the lock still running keeps its fence, so no session is granted the
// lock before it ends; should it never end, the lease runs out and the
// next try of any daemon ends its session ("Leases" in the package
// documentation). Abandoning a lock released or lost does nothing.
func (lk *Lock) Abandon() {
	if lk.abandoned.Swap(true) || lk.Err() != nil {
		return
	}
	lk.lose(errAbandoned)
}

// expireAsync loses the lock for cause apart: the caller holds the
// holder's mutex, which the loss takes.
func (lk *Lock) expireAsync(cause error) {
	if lk.ctx.Err() != nil || lk.expiring.Swap(true) {
		return
	}
	go lk.lose(cause)
}

// lose marks the lock lost with cause, logs why and unlocks it on the
// holder session, which keeps the others. A transaction of the lock
// still running keeps its fence, so no try is granted the lock before it
// ends; the Locker forgets the lock (and may take its key again) once its
// transactions are over.
func (lk *Lock) lose(cause error) {
	lk.loseMu.Lock()
	defer lk.loseMu.Unlock()
	if lk.ctx.Err() != nil {
		return
	}
	attrs := []any{slog.Int64("key", lk.key), slog.Int("pid", lk.pid), slog.String("error", cause.Error())}
	switch {
	case errors.Is(cause, errLeaseExpired), errors.Is(cause, errLeaseTaken):
		lk.logger.Warn("locks: lock lost: its lease was not renewed in time; nothing more is sent on its behalf, "+
			"and a waiting daemon may have ended its session", attrs...)
	case errors.Is(cause, errAbandoned):
		lk.logger.Warn("locks: lock given up: the job holding it did not return in time; the lock is unlocked "+
			"so that another job can take it, and nothing more is sent or marked on its behalf", attrs...)
	case errors.Is(cause, errVanished) && lk.locker.leasesOnly:
		lk.logger.Warn("locks: lock lost: its lease row is no longer this lock's (it ran out, or another daemon took it over); "+
			"nothing more is marked or sent on its behalf", attrs...)
	case errors.Is(cause, errVanished):
		lk.logger.Warn("locks: lock lost: it vanished while its connection still answers; "+
			"a transaction-mode connection pooler (such as PgBouncer in transaction mode) breaks session advisory locks, "+
			"connect directly or in session mode", attrs...)
	default:
		lk.logger.Warn("locks: lock lost: its connection failed; the server frees the lock when the session ends", attrs...)
	}
	lk.cancel(fmt.Errorf("%w: %w", ErrLockLost, cause))
	_ = lk.locker.unlock(context.Background(), lk)
	// Forgotten at once when no transaction of the lock is under way, so
	// the next try of its key is not busy for it; else by the one under
	// way as it ends (unlockMu).
	if lk.mu.TryLock() {
		lk.unlockMu()
	}
}

// unlockMu unlocks mu, and has the Locker forget the lock first if it is
// lost or released: its transactions are over.
func (lk *Lock) unlockMu() {
	if lk.ctx.Err() != nil {
		lk.locker.forget(lk)
	}
	lk.mu.Unlock()
}

// txBeginner hands pgx.BeginFunc transactions that roll back even when
// the caller's context is cancelled, so the pooled connection goes back
// to the pool clean.
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
