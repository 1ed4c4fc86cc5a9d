package locks

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// ErrLockBusy is returned by TryAcquire and Acquire when another session
// holds the lock.
var ErrLockBusy = errors.New("locks: lock is held by another session")

// ErrLockLost is wrapped by Lock.Err, Lock.WithTx and Lock.Release once the
// lock's session died or the lock vanished from it.
var ErrLockLost = errors.New("locks: lock lost")

// ErrReleased is returned by Lock.Err, and wrapped by Lock.WithTx, after
// Release.
var ErrReleased = errors.New("locks: lock released")

const (
	// CheckIntervalDefault is the default for Config.CheckInterval.
	CheckIntervalDefault = time.Second
	// CheckTimeoutDefault is the default for Config.CheckTimeout.
	CheckTimeoutDefault = 5 * time.Second
	// ApplicationNameDefault is the application_name of a lock's session when
	// the connection config sets none.
	ApplicationNameDefault = "syncer-lock"
	// ReleaseTimeout bounds Release, which runs even after its context is
	// cancelled.
	ReleaseTimeout = 5 * time.Second
)

// cleanupTimeout bounds a rollback or close that must run after the caller's
// context is cancelled.
const cleanupTimeout = 5 * time.Second

// cancelDeadlineDelay is how long a cancelled statement on a lock's session
// gets to stop after PostgreSQL receives a cancel request, before the socket
// deadline ends the connection (and with it the lock).
const cancelDeadlineDelay = 2 * time.Second

// sessionParams are set at connection start on every lock session.
var sessionParams = map[string]string{
	// Server-side keepalives: a dead client machine is noticed, and its lock
	// freed, within about idle + interval*count = 25 s.
	"tcp_keepalives_idle":     "10",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
	// The session holds the lock while idle, sometimes inside WithTx; a
	// server default must not end it.
	"idle_in_transaction_session_timeout": "0",
}

// Key derives a stable advisory lock key from a namespace and a name: the
// first 8 bytes of SHA-256(namespace + "\x00" + name) as a big-endian int64.
// The package documentation shows how to compute it in SQL and Ruby.
func Key(namespace, name string) int64 {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)[:8]))
}

// pgLocksIDs splits key as pg_locks shows a bigint advisory lock.
func pgLocksIDs(key int64) (classid, objid uint32) {
	return uint32(uint64(key) >> 32), uint32(uint64(key))
}

// Config configures a Locker.
type Config struct {
	// CheckInterval is how often an idle held lock verifies, on its own
	// session, that it still holds the lock. Defaults to CheckIntervalDefault
	// (1s).
	CheckInterval time.Duration

	// CheckTimeout bounds one self-check; a check that does not answer in
	// time counts as a lost lock. Defaults to CheckTimeoutDefault (5s).
	CheckTimeout time.Duration

	// Logger receives the warning logged when a lock is lost. Defaults to a
	// logger that discards everything.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.CheckInterval < 0 {
		return fmt.Errorf("locks: config: CheckInterval must not be negative, got %s", c.CheckInterval)
	}
	if c.CheckTimeout < 0 {
		return fmt.Errorf("locks: config: CheckTimeout must not be negative, got %s", c.CheckTimeout)
	}
	return nil
}

// Locker takes advisory locks, each on a new dedicated session. It holds no
// connection itself and is safe for concurrent use.
type Locker struct {
	connConfig    *pgx.ConnConfig
	checkInterval time.Duration
	checkTimeout  time.Duration
	logger        *slog.Logger
}

// New returns a Locker that opens lock sessions with a copy of connConfig,
// which must come from pgx.ParseConfig (a pool's Config().ConnConfig does).
// connConfig is not modified. cfg may be nil.
func New(connConfig *pgx.ConnConfig, cfg *Config) (*Locker, error) {
	if connConfig == nil {
		return nil, errors.New("locks: connConfig is required")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}

	cc := connConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = make(map[string]string)
	}
	for k, v := range sessionParams {
		cc.RuntimeParams[k] = v
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = ApplicationNameDefault
	}
	// pgx's default answer to a cancelled context is to close the socket,
	// which would end the session and lose the lock. Ask the server to cancel
	// the statement instead, so that cancelling the caller's context inside
	// WithTx or Acquire leaves the lock's session alive; the socket deadline
	// remains as the fallback for a server that does not answer.
	cc.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pgConn, DeadlineDelay: cancelDeadlineDelay}
	}

	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Locker{
		connConfig:    cc,
		checkInterval: cmp.Or(cfg.CheckInterval, CheckIntervalDefault),
		checkTimeout:  cmp.Or(cfg.CheckTimeout, CheckTimeoutDefault),
		logger:        logger,
	}, nil
}

// TryAcquire takes the lock for key if it is free and returns ErrLockBusy at
// once if another session holds it. Every call opens a new connection, which
// is closed again when the lock is busy.
func (l *Locker) TryAcquire(ctx context.Context, key int64) (*Lock, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("locks: try acquire: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
		// Closing the session frees the lock if the server granted it.
		closeConn(conn)
		return nil, fmt.Errorf("locks: try acquire: %w", err)
	}
	if !ok {
		closeConn(conn)
		return nil, ErrLockBusy
	}
	return l.newLock(conn, key), nil
}

// Acquire takes the lock for key, waiting at most timeout (and no longer than
// ctx allows) for another session to release it, and returns ErrLockBusy when
// the wait times out. A timeout of zero or less makes it TryAcquire.
func (l *Locker) Acquire(ctx context.Context, key int64, timeout time.Duration) (*Lock, error) {
	if timeout <= 0 {
		return l.TryAcquire(ctx, key)
	}
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("locks: acquire: %w", err)
	}
	got, err := acquireWait(ctx, conn, key, timeout)
	if err != nil {
		closeConn(conn)
		return nil, err
	}
	if !got {
		closeConn(conn)
		return nil, ErrLockBusy
	}
	return l.newLock(conn, key), nil
}

// acquireWait waits on the server for key with lock_timeout set to timeout
// and restores the session's lock_timeout afterwards, so statements run later
// in WithTx see the configured value. It reports false on timeout.
func acquireWait(ctx context.Context, conn *pgx.Conn, key int64, timeout time.Duration) (bool, error) {
	ms := int64(math.Ceil(float64(timeout) / float64(time.Millisecond)))
	if _, err := conn.Exec(ctx, "SELECT set_config('lock_timeout', $1, false)", strconv.FormatInt(ms, 10)+"ms"); err != nil {
		return false, fmt.Errorf("locks: acquire: set lock_timeout: %w", err)
	}
	_, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("locks: acquire: %w", err)
	}
	if _, err := conn.Exec(ctx, "RESET lock_timeout"); err != nil {
		return false, fmt.Errorf("locks: acquire: reset lock_timeout: %w", err)
	}
	return true, nil
}

func (l *Locker) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.connConfig)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// closeConn closes a connection that is being given up, even when the
// caller's context is already cancelled.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// Querier is what Holder needs: *pgx.Conn, *pgxpool.Pool and pgx.Tx all fit.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Holder reports the backend pid of a session holding the lock for key in
// the current database, read from pg_locks through q, for status displays.
// It is a snapshot: the holder may change right after it returns.
func (l *Locker) Holder(ctx context.Context, q Querier, key int64) (pid int, held bool, err error) {
	classid, objid := pgLocksIDs(key)
	err = q.QueryRow(ctx, `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = $1 AND objid = $2 AND objsubid = 1
		LIMIT 1`, classid, objid).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("locks: holder: %w", err)
	}
	return pid, true, nil
}
