package locks

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/syncer-dev/syncer/internal/database"
)

// ErrLockBusy is returned by TryAcquire when another session holds the lock.
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

// sessionParams are set on every lock session as soon as it is open (with
// set_config rather than in the startup packet, which PgBouncer refuses;
// see database.ApplySettings).
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

// Namespace is the namespace of syncer's own lock keys.
const Namespace = "syncer"

// MigrateKey serialises concurrent migrators across processes. It is a
// fixed value, the bytes of "syncermg" read as a big-endian int64, not a
// Key: it predates Key, and a migrator of an older release must keep
// excluding one of this release.
const MigrateKey int64 = 0x73796e6365726d67

// ExportKey is the key of the export lock of source name of the
// installation in schema: one per source, so sources export in parallel
// and daemons share them out. Advisory locks are per database, so the
// schema is part of the name: two installations in one database must not
// share a lock. Resources (jobs.Resources) keep the key the releases
// before sources had, Key("syncer", "export:"+schema), and a configured
// source the one its own lock had, so a daemon of the previous release
// and one of this release exclude each other during a rolling upgrade.
func ExportKey(schema, name string) int64 {
	if name == resources {
		return Key(Namespace, "export:"+schema)
	}
	return Key(Namespace, "export:"+schema+":source:"+name)
}

// resources is jobs.Resources: locks imports no package of syncer's.
const resources = "resources"

// DestinationKey is the key of the lock a daemon holds while it pushes to
// configured destination name of the installation in schema: one pusher at
// a time per destination, across daemons, so the destination's rate limit
// and requests in flight hold however many daemons share its sources.
func DestinationKey(schema, name string) int64 {
	return Key(Namespace, "push:"+schema+":destination:"+name)
}

// RelayKey is the key of the transaction-level lock that serialises the
// outbox relays of the installation in schema.
func RelayKey(schema string) int64 { return Key(Namespace, "relay:"+schema) }

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

	// Lease makes every lock a leased one (see the package documentation,
	// "Leases"): its holder renews a lease in syncer_lock_leases and stops
	// trusting the lock when it could not for LeaseTTL*4/5 by its own
	// clock, and a try that finds the lock held under a lease that ran out
	// ends the holder's session and takes the lock. The table must be on
	// the sessions' search_path (migration 011). Defaults to false.
	Lease bool

	// LeaseTTL is how long a lease lasts after its last renewal, by the
	// database's clock; it is renewed every fifth of it. A frozen holder
	// loses its lock to a waiting daemon about LeaseTTL after it froze.
	// Defaults to LeaseTTLDefault (10s).
	LeaseTTL time.Duration

	// IdleSessions is how many sessions that hold no lock the Locker
	// keeps for the next tries. A job takes two locks (its source's and
	// its destination's), and a session opened when a row comes costs
	// that row the connection's set-up: 20 to 140 ms on a busy two-core
	// machine, with TLS. Defaults to IdleSessionsDefault (2).
	IdleSessions int
}

// IdleSessionsDefault is the default Config.IdleSessions: the two locks of
// one job.
const IdleSessionsDefault = 2

func (c *Config) validate() error {
	if c.CheckInterval < 0 {
		return fmt.Errorf("locks: config: CheckInterval must not be negative, got %s", c.CheckInterval)
	}
	if c.CheckTimeout < 0 {
		return fmt.Errorf("locks: config: CheckTimeout must not be negative, got %s", c.CheckTimeout)
	}
	if c.IdleSessions < 0 {
		return fmt.Errorf("locks: config: IdleSessions must not be negative, got %d", c.IdleSessions)
	}
	if c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < leaseTTLMin) {
		return fmt.Errorf("locks: config: LeaseTTL must be at least %s, got %s", leaseTTLMin, c.LeaseTTL)
	}
	return nil
}

// Locker takes advisory locks, each held on a dedicated session. It keeps
// idle sessions between tries (Config.IdleSessions), so a daemon that tries
// a busy lock every few hundred milliseconds for hours opens one session,
// not one a try, and a job that starts when a row comes finds its sessions
// open; a released lock's session goes back to them. It is safe for
// concurrent use; Close closes the idle sessions.
type Locker struct {
	connConfig    *pgx.ConnConfig
	checkInterval time.Duration
	checkTimeout  time.Duration
	logger        *slog.Logger
	// leaseTTL is zero without leases.
	leaseTTL time.Duration
	lease    leaseConn
	// poolerOnce says once that a pooler stands between the lock sessions
	// and PostgreSQL.
	poolerOnce sync.Once
	// refused holds the keys whose stale holder this Locker was not
	// allowed to end, so each is said once.
	refused sync.Map

	mu sync.Mutex
	// idle are the sessions kept, at most maxIdle; the last put is taken
	// first, so the spare ones age and a dead one is found by its try.
	idle    []*pgx.Conn
	maxIdle int
	closed  bool
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
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = ApplicationNameDefault
	}
	database.ApplySettings(cc, sessionParams)
	// pgx's default answer to a cancelled context is to close the socket,
	// which would end the session and lose the lock. Ask the server to cancel
	// the statement instead, so that cancelling the caller's context inside
	// WithTx or TryAcquire leaves the lock's session alive; the socket deadline
	// remains as the fallback for a server that does not answer.
	cc.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pgConn, DeadlineDelay: cancelDeadlineDelay}
	}

	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Locker{
		connConfig:    cc,
		checkInterval: cmp.Or(cfg.CheckInterval, CheckIntervalDefault),
		checkTimeout:  cmp.Or(cfg.CheckTimeout, CheckTimeoutDefault),
		logger:        logger,
		maxIdle:       cmp.Or(cfg.IdleSessions, IdleSessionsDefault),
	}
	if cfg.Lease {
		l.leaseTTL = cmp.Or(cfg.LeaseTTL, LeaseTTLDefault)
	}
	return l, nil
}

// TryAcquire takes the lock for key if it is free and returns ErrLockBusy at
// once if another session holds it. It tries on the Locker's idle session
// when there is one, and keeps the session for the next try when the lock is
// busy: a busy try opens no session.
//
// With leases (Config.Lease), a busy try looks at the holder's lease: when
// it ran out by the database's clock, it ends the holder's session
// (pg_terminate_backend) and tries once more.
func (l *Locker) TryAcquire(ctx context.Context, key int64) (*Lock, error) {
	conn, reused, err := l.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("locks: try acquire: %w", err)
	}
	// The lease counts from before the try: by this process's clock, the
	// database wrote its expiry no earlier.
	start := time.Now()
	got, err := l.tryLock(ctx, conn, key)
	if err != nil && reused && ctx.Err() == nil {
		// The idle session may have died while it waited (a restarted
		// server, a terminated backend): one more try on a new one.
		closeConn(conn)
		if conn, err = l.connect(ctx); err != nil {
			return nil, fmt.Errorf("locks: try acquire: %w", err)
		}
		start = time.Now()
		got, err = l.tryLock(ctx, conn, key)
	}
	if err == nil && !got.ok && l.leaseTTL > 0 {
		var ended bool
		if ended, err = l.endStale(ctx, conn, key); err == nil && ended {
			start = time.Now()
			got, err = l.tryLock(ctx, conn, key)
		}
	}
	if err != nil {
		// Closing the session frees the lock if the server granted it.
		closeConn(conn)
		return nil, fmt.Errorf("locks: try acquire: %w", err)
	}
	if !got.ok {
		l.putIdle(conn)
		return nil, ErrLockBusy
	}
	if got.pid != conn.PgConn().PID() {
		l.poolerOnce.Do(func() {
			l.logger.Warn("locks: a connection pooler stands between syncer and PostgreSQL (the server's pid is not the one announced): "+
				"the lock sessions' TCP keepalives cannot be had (they act on the pooler's server connection, not on syncer's), "+
				"so a vanished daemon machine frees its lock only when the pooler notices"+l.leaseNote(),
				slog.Uint64("server_pid", uint64(got.pid)), slog.Uint64("announced_pid", uint64(conn.PgConn().PID())))
		})
	}
	return l.newLock(conn, key, int(got.pid), start), nil
}

func (l *Locker) leaseNote() string {
	if l.leaseTTL > 0 {
		return " or its lease runs out (" + l.leaseTTL.String() + ")"
	}
	return ""
}

// tried is the answer to a try: whether the lock was granted, and the
// server pid of the session that tried.
type tried struct {
	ok  bool
	pid uint32
}

func (l *Locker) tryLock(ctx context.Context, conn *pgx.Conn, key int64) (tried, error) {
	var t tried
	var pid int32
	var err error
	if l.leaseTTL > 0 {
		// The lease is written by the statement that takes the lock, so no
		// holder is ever without one a waiter can see run out.
		err = conn.QueryRow(ctx, tryLeaseSQL, key, l.leaseTTL.Seconds()).Scan(&t.ok, &pid)
	} else {
		err = conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1), pg_backend_pid()", key).Scan(&t.ok, &pid)
	}
	t.pid = uint32(pid)
	return t, err
}

// session returns an idle session, or a new one.
func (l *Locker) session(ctx context.Context) (conn *pgx.Conn, reused bool, err error) {
	l.mu.Lock()
	for conn == nil && len(l.idle) > 0 {
		n := len(l.idle) - 1
		conn, l.idle[n], l.idle = l.idle[n], nil, l.idle[:n]
		if conn.IsClosed() {
			conn = nil
		}
	}
	l.mu.Unlock()
	if conn != nil {
		return conn, true, nil
	}
	conn, err = l.connect(ctx)
	return conn, false, err
}

// putIdle keeps conn for the next try, or closes it when the Locker keeps
// enough already or is closed.
func (l *Locker) putIdle(conn *pgx.Conn) {
	l.mu.Lock()
	if len(l.idle) < l.maxIdle && !l.closed && !conn.IsClosed() {
		l.idle = append(l.idle, conn)
		conn = nil
	}
	l.mu.Unlock()
	if conn != nil {
		closeConn(conn)
	}
}

// Warm opens idle sessions until the Locker keeps Config.IdleSessions, so
// that the first jobs after a start find theirs open. A session that
// cannot be opened is left to the first try, which reports its error.
func (l *Locker) Warm(ctx context.Context) {
	for {
		l.mu.Lock()
		full := len(l.idle) >= l.maxIdle || l.closed
		l.mu.Unlock()
		if full {
			return
		}
		conn, err := l.connect(ctx)
		if err != nil {
			l.logger.DebugContext(ctx, "locks: open an idle session", slog.String("error", err.Error()))
			return
		}
		l.putIdle(conn)
	}
}

// Close closes the idle sessions. Locks already taken are not affected; a
// lock released after Close closes its session.
func (l *Locker) Close() {
	l.mu.Lock()
	idle := l.idle
	l.idle, l.closed = nil, true
	l.mu.Unlock()
	for _, conn := range idle {
		closeConn(conn)
	}
	l.closeLease()
}

func (l *Locker) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.connConfig)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// closeConn closes a lock session that is being given up, even when the
// caller's context is already cancelled. It first drops every advisory lock
// the session holds: through a pooler in session mode whose
// server_reset_query does not (an empty one), the server session, and the
// lock with it, would otherwise outlive the client in the pooler's pool.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if !conn.IsClosed() {
		uctx, ucancel := context.WithTimeout(ctx, unlockAllTimeout)
		_, _ = conn.Exec(uctx, "SELECT pg_advisory_unlock_all()")
		ucancel()
	}
	_ = conn.Close(ctx)
}

// unlockAllTimeout bounds the unlock before a lock session is closed: a
// session that does not answer is closed anyway.
const unlockAllTimeout = time.Second

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

// HolderOf reports the session holding the lock for key in the current
// database, for status displays. It is a snapshot: the holder may change
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
		return Holder{}, false, nil
	}
	if err != nil {
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
