package locks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/database"
)

// LeaseTTLDefault is the default for Config.LeaseTTL.
const LeaseTTLDefault = 10 * time.Second

// leaseTTLMin keeps a renewal (every fifth of the TTL) and the margin of
// the holder's own deadline (a fifth as well) above a database round trip.
const leaseTTLMin = time.Second

// terminateWait is how long a taker waits, in pg_terminate_backend, for the
// stale holder's backend to exit (and free the lock).
const terminateWait = 5 * time.Second

// errLeaseExpired is the cause of a loss where the holder could not renew
// its lease in time: by its own clock, a waiter may already have ended its
// session.
var errLeaseExpired = errors.New("lease not renewed in time (the process was frozen or the database did not answer)")

// errLeaseTaken is the cause of a loss where the lease was no longer the
// holder's to renew: it ran out, or the session no longer holds the lock.
var errLeaseTaken = errors.New("lease ran out or its session no longer holds the lock")

// tryLeaseSQL takes the lock ($1) and, if granted, writes the session's
// lease for $2 seconds, in one statement.
const tryLeaseSQL = `WITH try AS MATERIALIZED (SELECT pg_try_advisory_lock($1) AS ok),
lease AS (
	INSERT INTO syncer_lock_leases AS le (key, pid, expires_at)
	SELECT $1, pg_backend_pid(), now() + $2 * interval '1 second' FROM try WHERE ok
	ON CONFLICT (key) DO UPDATE SET pid = excluded.pid, expires_at = excluded.expires_at
	RETURNING 1)
SELECT ok, pg_backend_pid() FROM try, (SELECT count(*) FROM lease) AS written`

// renewSQL extends the lease of key $1 held by server pid $2 by $3 seconds,
// unless it already ran out (a waiter may be ending the session) or the
// session no longer holds the lock ($4, $5: the pg_locks ids).
const renewSQL = `UPDATE syncer_lock_leases SET expires_at = now() + $3 * interval '1 second'
WHERE key = $1 AND pid = $2 AND expires_at > now()
  AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $2 AND granted
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND classid = $4 AND objid = $5 AND objsubid = 1)`

// endStaleSQL ends the session holding key $1 ($2, $3: the pg_locks ids)
// if its lease ran out by the database's clock, waiting up to $4 ms for it
// to exit. The lease is first marked run out for good ('-infinity'), under
// its row lock, so a renewal racing with the taker either commits first (and
// the taker sees a lease that has not run out) or finds nothing to renew.
const endStaleSQL = `WITH holder AS (
	SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
	  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND classid = $2 AND objid = $3 AND objsubid = 1),
stale AS (
	UPDATE syncer_lock_leases SET expires_at = '-infinity'
	WHERE key = $1 AND expires_at < now() AND pid IN (SELECT pid FROM holder)
	RETURNING pid)
SELECT pid, pg_terminate_backend(pid, $4) FROM stale`

// endStale ends the session holding key if its lease ran out, and reports
// whether it did. A session it may not end (another role's, without
// pg_signal_backend) is said once, loudly, and counts as busy.
func (l *Locker) endStale(ctx context.Context, conn *pgx.Conn, key int64) (bool, error) {
	classid, objid := pgLocksIDs(key)
	var pid int32
	var ended bool
	err := conn.QueryRow(ctx, endStaleSQL, key, classid, objid, terminateWait.Milliseconds()).Scan(&pid, &ended)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		if _, said := l.refused.LoadOrStore(key, true); !said {
			l.logger.Error("locks: the lock's holder let its lease run out, but this daemon may not end its session: "+
				"run every daemon as the same role (a role may end its own sessions), or grant this one pg_signal_backend",
				slog.Int64("key", key), slog.String("error", pgErr.Message))
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("end stale holder: %w", err)
	}
	l.logger.Warn("locks: the lock's holder stopped renewing its lease (frozen, or cut off from the database): ended its session to take the lock",
		slog.Int64("key", key), slog.Int("holder_pid", int(pid)), slog.Bool("exited", ended))
	return true, nil
}

// HeldLive reports whether some session holds the lock for key under a
// lease that has not run out, or under no lease at all (a holder without
// leases). A lock whose holder's lease ran out is about to be taken over:
// the relay's poll gives a job the chance to. Needs syncer_lock_leases.
func HeldLive(ctx context.Context, q database.Querier, key int64) (bool, error) {
	classid, objid := pgLocksIDs(key)
	var held bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid = $2 AND l.objid = $3 AND l.objsubid = 1
		AND NOT EXISTS (SELECT 1 FROM syncer_lock_leases le WHERE le.key = $1 AND le.pid = l.pid AND le.expires_at < now()))`,
		key, classid, objid).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("locks: held: %w", err)
	}
	return held, nil
}

// leaseConn is the Locker's session for renewals, apart from the lock
// sessions, which a pipe keeps busy for as long as a drain lasts. It is
// opened on first use and again after an error.
type leaseConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

// renew renews the lease of key held by server pid and reports whether it
// was still this session's to renew.
func (l *Locker) renew(ctx context.Context, key int64, pid int) (bool, error) {
	lc := &l.lease
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.conn == nil || lc.conn.IsClosed() {
		conn, err := l.connect(ctx)
		if err != nil {
			return false, err
		}
		lc.conn = conn
	}
	classid, objid := pgLocksIDs(key)
	tag, err := lc.conn.Exec(ctx, renewSQL, key, pid, l.leaseTTL.Seconds(), classid, objid)
	if err != nil {
		// A statement cut short leaves the session in an unknown state.
		_ = lc.conn.Close(context.WithoutCancel(ctx))
		lc.conn = nil
		return false, err
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		// Close already closed this session's place: keep none open.
		_ = lc.conn.Close(context.WithoutCancel(ctx))
		lc.conn = nil
	}
	return tag.RowsAffected() == 1, nil
}

func (l *Locker) closeLease() {
	l.lease.mu.Lock()
	defer l.lease.mu.Unlock()
	if l.lease.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = l.lease.conn.Close(ctx)
		l.lease.conn = nil
	}
}

// leaseValidity is how long after the start of a renewal (or of the try
// that took the lock) the holder trusts its lease. A waiter acts only after
// the database's clock passed the lease's expiry, written no earlier than
// that start plus the TTL, so the holder stops trusting the lock a fifth of
// the TTL before any waiter may end its session.
func leaseValidity(ttl time.Duration) time.Duration { return ttl - ttl/5 }

// leaseLoop renews the lease every fifth of the TTL until the lock is lost
// or released, and loses the lock when the lease is no longer this
// session's or the holder's own deadline passed without a renewal.
func (lk *Lock) leaseLoop(ttl time.Duration) {
	defer lk.wg.Done()
	every := ttl / 5
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-lk.ctx.Done():
			return
		case <-ticker.C:
		}
		if err := lk.leaseCheck(); err != nil {
			lk.expire(err)
			return
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(lk.ctx, every)
		ok, err := lk.locker.renew(ctx, lk.key, lk.pid)
		cancel()
		switch {
		case err == nil && ok:
			lk.setDeadline(start.Add(leaseValidity(ttl)))
		case err == nil:
			lk.expire(errLeaseTaken)
			return
		case lk.ctx.Err() == nil:
			lk.logger.Debug("locks: lease renewal failed; trying again", slog.Int64("key", lk.key), slog.String("error", err.Error()))
		}
	}
}

// expire loses the lock for cause, once the session is free.
func (lk *Lock) expire(cause error) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.lose(cause)
}

func (lk *Lock) setDeadline(t time.Time) {
	lk.deadlineMu.Lock()
	defer lk.deadlineMu.Unlock()
	lk.deadline = t
}

// leaseCheck returns errLeaseExpired once the holder's own deadline passed:
// a comparison on the monotonic clock, which asks nothing of the database.
func (lk *Lock) leaseCheck() error {
	if lk.abandoned.Load() {
		return errAbandoned
	}
	if lk.locker.leaseTTL == 0 {
		return nil
	}
	lk.deadlineMu.Lock()
	d := lk.deadline
	lk.deadlineMu.Unlock()
	if !time.Now().Before(d) {
		return errLeaseExpired
	}
	return nil
}

// Check returns nil while the process may act as the lock's holder: the
// lock is not known lost or released and, with leases, its lease was
// renewed recently enough by this process's own monotonic clock. It asks
// nothing of the database, so it costs nothing before every request to a
// third party; once the lease's deadline passed it returns an error wrapping
// ErrLockLost and loses the lock, without waiting, whatever the lease loop
// (frozen with the rest of the process) has not seen yet.
func (lk *Lock) Check() error {
	if err := lk.Err(); err != nil {
		return err
	}
	if err := lk.leaseCheck(); err != nil {
		if !lk.expiring.Swap(true) {
			go lk.expire(err)
		}
		return fmt.Errorf("%w: %w", ErrLockLost, err)
	}
	return nil
}

type guardKey struct{}

// guard is a lock whose Context a context was derived from, and the guards
// of the contexts it was derived from.
type guard struct {
	lk   *Lock
	next *guard
}

// CheckContext returns the first error of Check among the locks whose
// Context ctx was derived from, and nil when there is none. A request sent
// on behalf of a lock's holder checks it just before it goes.
func CheckContext(ctx context.Context) error {
	g, _ := ctx.Value(guardKey{}).(*guard)
	for ; g != nil; g = g.next {
		if err := g.lk.Check(); err != nil {
			return err
		}
	}
	return nil
}
