package locks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// holder is the one session that holds every lock of a Locker (issue 58:
// a daemon with 3 sources and a tenant source of 16 lanes held 18 lock
// sessions idle, 29 sessions in all). Its statements are short (a try, an
// unlock, a renewal, one check of all its locks), serialized by mu, each
// bounded by Config.CheckTimeout and never by a caller's context: a
// statement that overruns ends the session, and every lock on it is lost.
// Nothing of a lock's transactions runs on it.
type holder struct {
	mu   sync.Mutex
	conn *pgx.Conn
	// locks are the locks taken on conn and not yet released or lost, by
	// key. A key in it is busy for this Locker's next tries: the server
	// would grant it again to the same session.
	locks map[int64]*Lock
	// stop, while the check loop runs, is closed to stop it when no lock
	// is left.
	stop   chan struct{}
	closed bool
}

// holderConn returns the holder session, opening one when there is none
// or it died (its locks are lost: the check loop or their next statement
// says so). The caller holds h.mu.
func (l *Locker) holderConn(ctx context.Context) (*pgx.Conn, error) {
	h := &l.h
	if h.conn != nil && !h.conn.IsClosed() {
		return h.conn, nil
	}
	if h.conn != nil {
		l.holderGone(h.conn, errors.New("holder session closed"))
		h.conn = nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.checkTimeout)
	defer cancel()
	conn, err := l.connect(cctx)
	if err != nil {
		return nil, err
	}
	h.conn = conn
	return conn, nil
}

// holderGone loses every lock held on conn, which died. The caller holds
// h.mu; the losses run apart, each once its lock's transaction is over.
func (l *Locker) holderGone(conn *pgx.Conn, cause error) {
	for _, lk := range l.h.locks {
		if lk.hconn == conn {
			lk.expireAsync(fmt.Errorf("holder session: %w", cause))
		}
	}
}

// holderCtx bounds one statement of the holder session.
func (l *Locker) holderCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), l.checkTimeout)
}

// tried is the answer to a try.
type tried struct {
	ok bool
	// ours: the key is held by a lock of this Locker.
	ours bool
	pid  uint32
	conn *pgx.Conn
	lk   *Lock
}

// tryLock tries key on the holder session and, when granted, registers
// the Lock.
func (l *Locker) tryLock(ctx context.Context, key int64) (tried, error) {
	h := &l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed && len(h.locks) == 0 && h.conn == nil && l.ownPool {
		return tried{}, errors.New("locker closed")
	}
	if _, ok := h.locks[key]; ok {
		return tried{ours: true}, nil
	}
	var t tried
	var pid int32
	var fenced bool
	var conn *pgx.Conn
	for attempt := 0; ; attempt++ {
		opened := h.conn == nil || h.conn.IsClosed()
		var err error
		if conn, err = l.holderConn(ctx); err != nil {
			return tried{}, err
		}
		hctx, cancel := l.holderCtx(ctx)
		if l.leaseTTL > 0 {
			// The lease is written by the statement that takes the lock, so
			// no holder is ever without one a waiter can see run out.
			err = conn.QueryRow(hctx, tryLeaseSQL, key, l.leaseTTL.Seconds(), fenceKey(key)).Scan(&t.ok, &fenced, &pid)
		} else {
			err = conn.QueryRow(hctx, trySQL, key, fenceKey(key)).Scan(&t.ok, &fenced, &pid)
		}
		cancel()
		if err == nil {
			break
		}
		if !conn.IsClosed() {
			return tried{}, err
		}
		l.holderGone(conn, err)
		h.conn = nil
		// The holder session may have died while it waited (a restarted
		// server, a terminated backend): once more on a new one.
		if opened || attempt > 0 || ctx.Err() != nil {
			return tried{}, err
		}
	}
	t.pid, t.conn = uint32(pid), conn
	if t.ok && !fenced {
		// A transaction of the lock's last holder is still running: the
		// lock is not granted until it is over (see Lock.WithTx).
		if err := l.unlockOn(ctx, conn, key); err != nil {
			return tried{}, err
		}
		t.ok = false
	}
	if t.ok {
		t.lk = l.newLock(conn, key, int(pid))
		h.locks[key] = t.lk
		if h.stop == nil {
			h.stop = make(chan struct{})
			go l.checkLoop(h.stop)
		}
	}
	return t, nil
}

// trySQL takes the lock ($1) and, when granted, checks its fence ($2)
// is free: no transaction of a former holder still runs under it. The
// fence's exclusive lock is the statement's own, released at its end.
const trySQL = `WITH try AS MATERIALIZED (SELECT pg_try_advisory_lock($1) AS ok),
fence AS MATERIALIZED (SELECT CASE WHEN ok THEN pg_try_advisory_xact_lock($2) ELSE false END AS ok FROM try)
SELECT t.ok, f.ok, pg_backend_pid() FROM try t, fence f`

// unlockOn unlocks key on conn, the holder session; the caller holds
// h.mu. An unlock that fails ends the session.
func (l *Locker) unlockOn(ctx context.Context, conn *pgx.Conn, key int64) error {
	hctx, cancel := l.holderCtx(ctx)
	defer cancel()
	var unlocked bool
	if err := conn.QueryRow(hctx, "SELECT pg_advisory_unlock($1)", key).Scan(&unlocked); err != nil {
		l.holderGone(conn, err)
		closeConn(conn)
		if l.h.conn == conn {
			l.h.conn = nil
		}
		return fmt.Errorf("unlock: %w", err)
	}
	if !unlocked {
		return errVanished
	}
	return nil
}

// unlock releases lk's key on the holder session, if lk was taken on the
// session still open. lk stays known to the Locker, so its next try of
// the key is busy, until forget.
func (l *Locker) unlock(ctx context.Context, lk *Lock) error {
	if l.leasesOnly {
		return l.leaseRelease(ctx, lk)
	}
	h := &l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != lk.hconn || h.conn == nil || h.conn.IsClosed() {
		return errHolderGone
	}
	return l.unlockOn(ctx, h.conn, lk.key)
}

// forget forgets lk, whose transactions are over; then, if the Locker is
// closed and lk was its last lock, ends the holder session.
func (l *Locker) forget(lk *Lock) {
	h := &l.h
	h.mu.Lock()
	if h.locks[lk.key] == lk {
		delete(h.locks, lk.key)
	}
	if len(h.locks) == 0 && h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
	last := h.closed && len(h.locks) == 0
	h.mu.Unlock()
	if last {
		l.closeHolder()
	}
}

// errHolderGone is the cause of a loss where the holder session the lock
// was taken on is gone.
var errHolderGone = errors.New("the holder session of the lock is gone")

// checkLoop verifies, every CheckInterval, that the holder session still
// holds every lock taken on it, in one statement, until no lock is left.
func (l *Locker) checkLoop(stop <-chan struct{}) {
	h := &l.h
	ticker := time.NewTicker(l.checkInterval)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ticker.C:
		}
		h.mu.Lock()
		select {
		case <-stop:
			h.mu.Unlock()
			return
		default:
		}
		l.checkHeld()
		h.mu.Unlock()
	}
}

// checkHeld runs one check; the caller holds h.mu.
func (l *Locker) checkHeld() {
	h := &l.h
	conn := h.conn
	if conn == nil || conn.IsClosed() {
		for _, lk := range h.locks {
			lk.expireAsync(errHolderGone)
		}
		return
	}
	hctx, cancel := l.holderCtx(context.Background())
	defer cancel()
	rows, err := conn.Query(hctx, heldSQL)
	var held []int64
	if err == nil {
		held, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil {
		// Unable to prove the locks are held counts as lost; closing the
		// session frees them on the server if it still has them.
		l.holderGone(conn, fmt.Errorf("self-check: %w", err))
		closeConn(conn)
		h.conn = nil
		return
	}
	have := make(map[int64]bool, len(held))
	for _, k := range held {
		have[k] = true
	}
	for key, lk := range h.locks {
		if lk.hconn == conn && !have[key] {
			lk.expireAsync(errVanished)
		}
	}
}

// heldSQL lists the advisory locks the session holds, as bigint keys.
const heldSQL = `SELECT ((classid::bigint << 32) | objid::bigint) FROM pg_locks
	WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1`

// fenceKey is the key of lock key's fence: every transaction of the
// lock's holder takes it shared (Lock.WithTx, Pipe.Send), and a try takes
// it exclusive for an instant, so a lock is never granted while a
// transaction of its former holder runs.
func fenceKey(key int64) int64 { return key ^ fenceMask }

// fenceMask turns a key into its fence's: a constant, so other tools can
// compute it (and Key's keys are uniform, so a fence never meets a key).
const fenceMask int64 = 0x5f53594e43464e43 // "_SYNCFNC"
