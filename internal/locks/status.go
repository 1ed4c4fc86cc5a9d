package locks

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncer-dev/syncer/internal/database"
)

// Holder is the session holding a lock, as status shows it.
type Holder struct {
	// PID is the backend pid of the holding session (pg_locks.pid).
	PID int
	// ApplicationName and ClientAddr are the session's, from
	// pg_stat_activity; ClientAddr is empty for a Unix socket.
	ApplicationName string
	ClientAddr      string
	// Role, Host and Process are read from an application_name set by
	// database.ApplicationName: what the process is, its machine and its
	// pid there. Empty (Process 0) for a session named otherwise.
	Role, Host string
	Process    int
}

// leaseHolderSQL names the daemon holding key $1 by a lease alone
// (leaseonly.go): its PID stays 0, no session holds the lock.
const leaseHolderSQL = `SELECT holder_name FROM syncer_lock_leases
	WHERE key = $1 AND holder IS NOT NULL AND expires_at > clock_timestamp()`

// HolderOf reports the session holding the lock for key in the current
// database, for status displays, or the daemon holding it by a lease alone
// (Config.LeasesOnly; PID 0, no address). It is a snapshot: the holder may change
// right after it returns.
func HolderOf(ctx context.Context, q database.Querier, key int64) (Holder, bool, error) {
	classid, objid := pgLocksIDs(key)
	var h Holder
	var app, addr *string
	err := q.QueryRow(ctx, `SELECT l.pid, a.application_name, host(a.client_addr)
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1
		LIMIT 1`, classid, objid).Scan(&h.PID, &app, &addr)
	if errors.Is(err, pgx.ErrNoRows) {
		// No session holds it: a Locker of leases alone may, by its row.
		err = q.QueryRow(ctx, leaseHolderSQL, key).Scan(&app)
		var pgErr *pgconn.PgError
		switch {
		case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == "42P01":
			// 42P01: a schema older than the lease table has no such holder.
			return Holder{}, false, nil
		case err != nil:
			return Holder{}, false, fmt.Errorf("locks: holder: %w", err)
		}
		addr = nil
	} else if err != nil {
		return Holder{}, false, fmt.Errorf("locks: holder: %w", err)
	}
	if app != nil {
		h.ApplicationName = *app
		h.Role, h.Host, h.Process, _ = database.ParseApplicationName(*app)
	}
	if addr != nil {
		h.ClientAddr = *addr
	}
	return h, true, nil
}

// Held reports whether some session holds the lock for key: what the
// relay's poll asks.
func Held(ctx context.Context, q database.Querier, key int64) (bool, error) {
	_, held, err := HolderOf(ctx, q, key)
	return held, err
}

// LeasesHeldSQL is a query of the locks held by a lease alone
// (Config.LeasesOnly) and live, counted by their holder's
// application_name: columns app and leases (int). It is for a statement
// that reads them beside what it reads (status's sessions, one statement
// where syncer_lock_leases is read by no package but this one).
const LeasesHeldSQL = `SELECT holder_name AS app, count(*)::int AS leases FROM syncer_lock_leases
	WHERE holder IS NOT NULL AND holder_name IS NOT NULL AND expires_at > clock_timestamp()
	GROUP BY holder_name`
