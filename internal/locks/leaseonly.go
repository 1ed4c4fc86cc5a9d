package locks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Leases alone (Config.LeasesOnly). Through a pooler in transaction mode
// with no SYNCER_DIRECT_URL there is no session to hold an advisory lock:
// each statement may run on another server session. The lease row is then
// the lock (see the package documentation, "Leases alone"):
//
//   - a try inserts the row, or takes it over once it ran out by the
//     database's clock (clock_timestamp()), with a random token of the
//     new Lock as its holder;
//   - one statement renews every lease of the Locker every fifth of the
//     TTL, and only the rows still carrying their Lock's token;
//   - each transaction of the lock (WithTx, a Pipe's) locks the row FOR
//     SHARE and checks token and expiry (leaseFenceSQL); FOR SHARE, not
//     FOR KEY SHARE, because a taker's ON CONFLICT DO UPDATE touches no
//     key column and takes a lock KEY SHARE does not conflict with. So no
//     taker writes its token while a transaction of the former holder
//     runs, and such a transaction, its client frozen, ends by its own
//     transaction-local idle_in_transaction_session_timeout;
//   - a release deletes the row.
//
// Everything runs on the pool: the Locker holds no session of its own.

// leaseTrySQL takes key $1 for token $2 (holder_name $3) for $4 seconds,
// returning a row when it did. A live lease is seen first without any row
// lock (the NOT EXISTS): a try of a held key, which the relay's polls make
// often, never waits for the holder's transactions. A row a session
// advisory lock's holder wrote (holder NULL: a daemon with a whole
// session, before this one) is live only while that session still holds
// the lock ($5, $6: its pg_locks ids): a daemon restarted without
// SYNCER_DIRECT_URL does not wait out the lease its former self left.
const leaseTrySQL = `INSERT INTO syncer_lock_leases AS le (key, pid, holder, holder_name, expires_at)
SELECT $1, 0, $2, $3, clock_timestamp() + $4 * interval '1 second'
WHERE NOT EXISTS (SELECT 1 FROM syncer_lock_leases o WHERE o.key = $1 AND o.expires_at >= clock_timestamp()
	AND (o.holder IS NOT NULL OR EXISTS (SELECT 1 FROM pg_locks WHERE ` + sessionHeldWhere + `)))
ON CONFLICT (key) DO UPDATE SET pid = 0, holder = excluded.holder, holder_name = excluded.holder_name, expires_at = excluded.expires_at
WHERE le.expires_at < clock_timestamp()
	OR (le.holder IS NULL AND NOT EXISTS (SELECT 1 FROM pg_locks o WHERE o.locktype = 'advisory' AND o.granted AND o.pid = le.pid
		AND o.classid = $5 AND o.objid = $6 AND o.objsubid = 1))
RETURNING 1`

// sessionHeldWhere is the advisory lock ($5, $6) granted to the session
// (o.pid) that wrote lease row o.
const sessionHeldWhere = `locktype = 'advisory' AND granted AND pid = o.pid AND classid = $5 AND objid = $6 AND objsubid = 1`

// leaseRenewSQL renews, for $3 seconds, each lease of keys $1 still
// carrying its token ($2, in the same order) and not run out, and returns
// the keys it renewed. Rows in key order: two renewals never wait for each
// other in a cycle.
const leaseRenewSQL = `UPDATE syncer_lock_leases AS le SET expires_at = clock_timestamp() + $3 * interval '1 second'
FROM (SELECT * FROM unnest($1::bigint[], $2::text[]) AS u(key, holder) ORDER BY key) AS u
WHERE le.key = u.key AND le.holder = u.holder AND le.expires_at > clock_timestamp()
RETURNING le.key`

// leaseReleaseSQL deletes the lease of key $1 if token $2 still holds it.
const leaseReleaseSQL = `DELETE FROM syncer_lock_leases WHERE key = $1 AND holder = $2`

// leaseFenceSQL bounds the transaction ($3: idle in transaction, $4: a
// statement, both in ms, for this transaction only) and locks the lease
// row of key $1 FOR SHARE if token $2 holds it and it has not run out.
const leaseFenceSQL = `SELECT set_config('idle_in_transaction_session_timeout', $3, true),
	set_config('statement_timeout', $4, true),
	EXISTS (SELECT 1 FROM syncer_lock_leases WHERE key = $1 AND holder = $2 AND expires_at > clock_timestamp() FOR SHARE)`

// leaseTryLockTimeout bounds a try's wait for the lease row: only a row
// that ran out and is still locked by a transaction of its former holder
// (frozen; its idle timeout ends it) makes it wait. Such a try is busy.
const leaseTryLockTimeout = 200 * time.Millisecond

// errLeaseFence is the cause of a loss found by a transaction's fence: the
// lease row no longer carries the Lock's token, or ran out.
var errLeaseFence = errors.New("the lease is no longer this lock's (it ran out, or another daemon took it)")

// leaseIdleTimeout bounds how long a transaction of a leased lock may sit
// idle: a frozen holder's transaction keeps the row locked FOR SHARE, and
// a taker waits for it. Half the TTL: the taker acts once the lease ran
// out, so a holder frozen inside a transaction delays it by at most that.
func leaseIdleTimeout(ttl time.Duration) time.Duration { return ttl / 2 }

func newLeaseToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func pgMillis(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }

// leaseRun runs sql on a pooled connection after set_config of name to
// value for its implicit transaction alone (one batch, one Sync: one
// transaction, also through a pooler), bounded by the check timeout.
func (l *Locker) leaseRun(ctx context.Context, name, value, sql string, args ...any) (pgx.Rows, func(), error) {
	pool, err := l.txPool()
	if err != nil {
		return nil, func() {}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.checkTimeout)
	b := &pgx.Batch{}
	b.Queue("SELECT set_config($1, $2, true)", name, value)
	b.Queue(sql, args...)
	br := pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		cancel()
		return nil, func() {}, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		cancel()
		return nil, func() {}, err
	}
	return rows, func() { rows.Close(); _ = br.Close(); cancel() }, nil
}

// tryLease is TryAcquire for a Locker of leases alone.
func (l *Locker) tryLease(ctx context.Context, key int64) (*Lock, error) {
	h := &l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed && len(h.locks) == 0 && l.ownPool {
		return nil, errors.New("locks: try acquire: locker closed")
	}
	if _, ok := h.locks[key]; ok {
		return nil, ErrLockBusy
	}
	token := newLeaseToken()
	// The lease counts from before the try: by this process's clock, the
	// database wrote its expiry no earlier.
	start := time.Now()
	classid, objid := pgLocksIDs(key)
	rows, done, err := l.leaseRun(ctx, "lock_timeout", pgMillis(leaseTryLockTimeout), leaseTrySQL,
		key, token, l.holderName, l.leaseTTL.Seconds(), classid, objid)
	var got []int32
	if err == nil {
		got, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	}
	done()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03":
		// The row ran out but a transaction of its former holder still
		// locks it: busy until that transaction ends.
		return nil, ErrLockBusy
	case err != nil:
		return nil, fmt.Errorf("locks: try acquire: %w", err)
	case len(got) == 0:
		return nil, ErrLockBusy
	}
	lk := l.newLock(nil, key, 0)
	lk.token = token
	lk.deadline = start.Add(leaseValidity(l.leaseTTL))
	h.locks[key] = lk
	if h.stop == nil {
		h.stop = make(chan struct{})
		go l.renewLoop(h.stop)
	}
	return lk, nil
}

// renewLoop renews every lease of the Locker, in one statement every fifth
// of the TTL, until no lock is left.
func (l *Locker) renewLoop(stop <-chan struct{}) {
	ticker := time.NewTicker(l.leaseTTL / 5)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ticker.C:
		}
		l.renewAll()
	}
}

// renewAll renews the leases of the Locker's locks and loses those whose
// lease is no longer theirs, or whose deadline passed without a renewal.
func (l *Locker) renewAll() {
	h := &l.h
	h.mu.Lock()
	var lks []*Lock
	for _, lk := range h.locks {
		if lk.ctx.Err() != nil {
			continue
		}
		if err := lk.leaseCheck(); err != nil {
			lk.expireAsync(err)
			continue
		}
		lks = append(lks, lk)
	}
	h.mu.Unlock()
	if len(lks) == 0 {
		return
	}
	keys := make([]int64, len(lks))
	tokens := make([]string, len(lks))
	for i, lk := range lks {
		keys[i], tokens[i] = lk.key, lk.token
	}
	start := time.Now()
	// A renewal waits for the lock's transaction under way (its FOR
	// SHARE): bounded, so a stuck one cannot hold up the others' for long.
	rows, done, err := l.leaseRun(context.Background(), "statement_timeout", pgMillis(l.checkTimeout), leaseRenewSQL,
		keys, tokens, l.leaseTTL.Seconds())
	var renewed []int64
	if err == nil {
		renewed, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	done()
	if err != nil {
		// Tried again at the next tick; a lock whose deadline passes
		// meanwhile is lost then, and Check refuses it at once.
		l.logger.Debug("locks: lease renewal failed; trying again", slog.Int("locks", len(lks)), slog.String("error", err.Error()))
		return
	}
	ok := make(map[int64]bool, len(renewed))
	for _, k := range renewed {
		ok[k] = true
	}
	for _, lk := range lks {
		if ok[lk.key] {
			lk.setDeadline(start.Add(leaseValidity(l.leaseTTL)))
		} else {
			lk.expireAsync(errLeaseTaken)
		}
	}
}

// leaseRelease deletes lk's lease if it is still lk's: errVanished when it
// was not.
func (l *Locker) leaseRelease(ctx context.Context, lk *Lock) error {
	pool, err := l.txPool()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.checkTimeout)
	defer cancel()
	tag, err := pool.Exec(ctx, leaseReleaseSQL, lk.key, lk.token)
	if err != nil {
		return fmt.Errorf("delete the lease: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errVanished
	}
	return nil
}

// leaseFence is the fence of a transaction of a leased lock: it bounds the
// transaction and locks the lease row FOR SHARE if it is still lk's.
func (lk *Lock) leaseFence(ctx context.Context, tx pgx.Tx) error {
	var idle, stmt string
	var held bool
	ttl := lk.locker.leaseTTL
	if err := tx.QueryRow(ctx, leaseFenceSQL, lk.key, lk.token, pgMillis(leaseIdleTimeout(ttl)), pgMillis(ttl)).
		Scan(&idle, &stmt, &held); err != nil {
		return fmt.Errorf("verify lease: %w", err)
	}
	if !held {
		return errVanished
	}
	return nil
}
