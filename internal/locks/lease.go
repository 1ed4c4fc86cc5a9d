package locks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// tryLeaseSQL takes the lock ($1) and, if granted and its fence ($3) is
// free (trySQL), writes the session's lease for $2 seconds, in one
// statement. A live lease of a Locker of leases alone (holder set:
// leaseonly.go) is a holder too: then no lease is written, and the try
// reports its fence busy, so the lock is given back (tryLock). Seen
// without a row lock first, so a try never waits on its holder's
// transactions.
const tryLeaseSQL = `WITH try AS MATERIALIZED (SELECT pg_try_advisory_lock($1) AS ok),
fence AS MATERIALIZED (SELECT CASE WHEN ok THEN pg_try_advisory_xact_lock($3) ELSE false END AS ok FROM try),
lease AS (
	INSERT INTO syncer_lock_leases AS le (key, pid, expires_at)
	SELECT $1, pg_backend_pid(), now() + $2 * interval '1 second' FROM fence
	WHERE ok AND NOT EXISTS (SELECT 1 FROM syncer_lock_leases o
		WHERE o.key = $1 AND o.holder IS NOT NULL AND o.expires_at >= clock_timestamp())
	ON CONFLICT (key) DO UPDATE SET pid = excluded.pid, expires_at = excluded.expires_at, holder = NULL, holder_name = NULL
	RETURNING 1)
SELECT t.ok, f.ok AND w.n > 0, pg_backend_pid() FROM try t, fence f, (SELECT count(*) AS n FROM lease) AS w`

// renewSQL extends the lease of key $1 held by server pid $2 by $3 seconds,
// unless it already ran out (a waiter may be ending the session) or the
// session no longer holds the lock ($4, $5: the pg_locks ids).
const renewSQL = `UPDATE syncer_lock_leases SET expires_at = now() + $3 * interval '1 second'
WHERE key = $1 AND pid = $2 AND expires_at > now()
  AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = $2 AND granted
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND classid = $4 AND objid = $5 AND objsubid = 1)`

// endStaleSQL ends, if the lease of key $1 ran out by the database's
// clock, the session holding the lock ($2, $3: the pg_locks ids) and the
// sessions whose transactions hold its fence ($4, $5), waiting up to $6 ms
// for each to exit. The lease is first marked run out for good
// ('-infinity'), under its row lock, so a renewal racing with the taker
// either commits first (and the taker sees a lease that has not run out)
// or finds nothing to renew. The ending spares the session running it.
const endStaleSQL = `WITH ended AS (
	SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
	  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND ((classid = $2 AND objid = $3) OR (classid = $4 AND objid = $5)) AND objsubid = 1),
stale AS (
	UPDATE syncer_lock_leases SET expires_at = '-infinity'
	WHERE key = $1 AND expires_at < now() AND EXISTS (SELECT 1 FROM ended)
	RETURNING 1)
SELECT e.pid, pg_terminate_backend(e.pid, $6) FROM ended e, stale`

// endStale ends the sessions holding key or its fence if its lease ran
// out, and reports whether it did. A session it may not end (another
// role's, without pg_signal_backend) is said once, loudly, and counts as
// busy. It runs on a pooled connection: the wait for the ended sessions
// to exit must not hold up the holder session.
func (l *Locker) endStale(ctx context.Context, key int64) (bool, error) {
	classid, objid := pgLocksIDs(key)
	fclassid, fobjid := pgLocksIDs(fenceKey(key))
	pool, err := l.txPool()
	if err != nil {
		return false, err
	}
	rows, err := pool.Query(ctx, endStaleSQL, key, classid, objid, fclassid, fobjid, terminateWait.Milliseconds())
	type endedPid struct {
		Pid   int32
		Ended bool
	}
	var ended []endedPid
	if err == nil {
		ended, err = pgx.CollectRows(rows, pgx.RowToStructByPos[endedPid])
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		if _, said := l.refused.LoadOrStore(key, true); !said {
			l.logger.Error("locks: the lock's holder let its lease run out, but this daemon may not end its session: "+
				"run every daemon as the same role (a role may end its own sessions), or grant this one pg_signal_backend",
				slog.Int64("key", key), slog.String("error", pgErr.Message))
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("end stale holder: %w", err)
	case len(ended) == 0:
		return false, nil
	}
	for _, e := range ended {
		l.logger.Warn("locks: the lock's holder stopped renewing its lease (frozen, or cut off from the database): ended its session to take the lock",
			slog.Int64("key", key), slog.Int("holder_pid", int(e.Pid)), slog.Bool("exited", e.Ended))
	}
	return true, nil
}

// HeldLive reports whether some session holds the lock for key under a
// lease that has not run out, or under no lease at all (a holder without
// leases). A lock whose holder's lease ran out is about to be taken over:
// the relay's poll gives a job the chance to. A lease alone (Config.LeasesOnly)
// counts while it has not run out. Needs syncer_lock_leases (032).
func HeldLive(ctx context.Context, q database.Querier, key int64) (bool, error) {
	classid, objid := pgLocksIDs(key)
	var held bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid = $2 AND l.objid = $3 AND l.objsubid = 1
		AND NOT EXISTS (SELECT 1 FROM syncer_lock_leases le WHERE le.key = $1 AND le.pid = l.pid AND le.expires_at < now()))
		OR EXISTS (SELECT 1 FROM syncer_lock_leases le WHERE le.key = $1 AND le.holder IS NOT NULL AND le.expires_at > clock_timestamp())`,
		key, classid, objid).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("locks: held: %w", err)
	}
	return held, nil
}

// renew renews, on the holder session conn, the lease of key held by
// server pid and reports whether it was still this session's to renew.
// A renewal that fails ends the holder session (its locks are lost): one
// that does not answer in CheckTimeout cannot be trusted.
func (l *Locker) renew(ctx context.Context, conn *pgx.Conn, key int64, pid int) (bool, error) {
	h := &l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != conn || conn.IsClosed() {
		return false, nil
	}
	hctx, cancel := l.holderCtx(ctx)
	defer cancel()
	classid, objid := pgLocksIDs(key)
	tag, err := conn.Exec(hctx, renewSQL, key, pid, l.leaseTTL.Seconds(), classid, objid)
	if err != nil {
		l.holderGone(conn, fmt.Errorf("renew a lease: %w", err))
		closeConn(conn)
		h.conn = nil
		return false, err
	}
	return tag.RowsAffected() == 1, nil
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
		ok, err := lk.locker.renew(context.Background(), lk.hconn, lk.key, lk.pid)
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

// expire loses the lock for cause.
func (lk *Lock) expire(cause error) { lk.lose(cause) }

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
