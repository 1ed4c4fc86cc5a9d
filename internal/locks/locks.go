package locks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

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

// sessionParams are set on every lock session as soon as it is open (with
// set_config rather than in the startup packet, which PgBouncer refuses;
// see database.ApplySettings).
var sessionParams = map[string]string{
	// Server-side keepalives: a dead client machine is noticed, and its lock
	// freed, within about idle + interval*count = 25 s.
	"tcp_keepalives_idle":     "10",
	"tcp_keepalives_interval": "5",
	"tcp_keepalives_count":    "3",
	// The session holds the locks while idle; a server default must not
	// end it.
	"idle_in_transaction_session_timeout": "0",
}

// Config configures a Locker.
type Config struct {
	// CheckInterval is how often the holder session verifies that it
	// still holds every lock taken on it. Defaults to CheckIntervalDefault
	// (1s).
	CheckInterval time.Duration

	// CheckTimeout bounds one statement on the holder session (a try, a
	// check, a renewal, an unlock); one that does not answer in time ends
	// the session, and every lock on it is lost. Defaults to
	// CheckTimeoutDefault (5s).
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

	// Pool runs the locks' transactions (WithTx, Pipe) and the ending of
	// stale holders: none of them needs the holder session. Defaults to a
	// pool of the Locker's own, of at most TxConnsDefault connections,
	// closed by Close.
	Pool *pgxpool.Pool

	// Stateless says that Pool goes through a pooler in transaction mode
	// (database.Pools.Stateless): a Pipe then runs each transaction as it
	// is sent, one round trip after the other, with nothing prepared and
	// no token left on the session (see Pipe). The holder session, opened
	// with the Locker's connConfig, must be a whole session
	// (SYNCER_DIRECT_URL). Defaults to false.
	Stateless bool

	// LeasesOnly makes every lock a row of syncer_lock_leases and nothing
	// else (see the package documentation, "Leases alone"): no session
	// holds anything, so Pool may go through a pooler in transaction mode
	// with no whole session beside it (no SYNCER_DIRECT_URL). It implies
	// Lease and Stateless. The table must have migration 032's columns.
	// Defaults to false.
	LeasesOnly bool

	// IdleSessions is ignored: every lock of a Locker is held by one
	// session (issue 58). It stays for the callers that set it.
	IdleSessions int
}

// IdleSessionsDefault is kept for the callers that set
// Config.IdleSessions, which is ignored.
const IdleSessionsDefault = 2

// TxConnsDefault bounds the pool a Locker opens for its locks'
// transactions when Config.Pool is nil.
const TxConnsDefault = 8

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

// Locker takes advisory locks, all held by one session of its own, the
// holder (holder.go), whatever their number: a daemon's sources, lanes and
// destinations cost it one server connection, not one each. Their
// transactions run on pooled connections, fenced by the lock (see
// Lock.WithTx). It is safe for concurrent use; Close ends the holder
// session once no lock is held on it.
type Locker struct {
	connConfig    *pgx.ConnConfig
	checkInterval time.Duration
	checkTimeout  time.Duration
	logger        *slog.Logger
	// leaseTTL is zero without leases.
	leaseTTL time.Duration
	// stateless: the transactions' pool keeps no session state
	// (Config.Stateless).
	stateless bool
	// leasesOnly: the locks are lease rows alone (Config.LeasesOnly,
	// leaseonly.go); holderName is written in them, for status.
	leasesOnly bool
	holderName string
	// pool runs the transactions; ownPool when the Locker opens it
	// (poolMu guards its opening and closing).
	poolMu  sync.Mutex
	pool    *pgxpool.Pool
	ownPool bool
	// poolClosed is set once closeHolder closed the Locker's own pool:
	// txPool opens none after it, which nothing would close.
	poolClosed bool
	// poolerOnce says once that a pooler stands between the holder
	// session and PostgreSQL.
	poolerOnce sync.Once
	// refused holds the keys whose stale holder this Locker was not
	// allowed to end, so each is said once.
	refused sync.Map

	h holder
}

// New returns a Locker that opens its holder session with a copy of
// connConfig, which must come from pgx.ParseConfig (a pool's
// Config().ConnConfig does). connConfig is not modified. cfg may be nil.
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
	// A statement of the holder session runs under a timeout of its own,
	// never under a caller's context; one that overruns it ends the
	// session (the socket's deadline), which frees its locks on the
	// server: no cancel request (see database.NoCancelRequests).
	cc.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pgConn.Conn()}
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
		pool:          cfg.Pool,
		stateless:     cfg.Stateless,
	}
	if l.pool == nil {
		// Opened on first use: a Locker that takes no lock opens nothing.
		l.ownPool = true
	}
	if cfg.Lease || cfg.LeasesOnly {
		l.leaseTTL = cmp.Or(cfg.LeaseTTL, LeaseTTLDefault)
	}
	if cfg.LeasesOnly {
		l.leasesOnly, l.stateless = true, true
		l.holderName = cc.RuntimeParams["application_name"]
	}
	l.h.locks = map[int64]*Lock{}
	return l, nil
}

// TryAcquire takes the lock for key if it is free and returns ErrLockBusy at
// once if another session holds it, or a Lock of this Locker still holds
// it (advisory locks are reentrant on one session: this Locker counts its
// own). The try runs on the holder session, opened when there is none.
//
// A lock is only granted with its fence (see Lock.WithTx): a transaction
// of a holder that lost the lock, still running, keeps it busy.
//
// With leases (Config.Lease), a busy try looks at the holder's lease: when
// it ran out by the database's clock, it ends the holder's session and the
// sessions of its transactions (pg_terminate_backend) and tries once more.
func (l *Locker) TryAcquire(ctx context.Context, key int64) (*Lock, error) {
	if l.leasesOnly {
		return l.tryLease(ctx, key)
	}
	// The lease counts from before the try: by this process's clock, the
	// database wrote its expiry no earlier.
	start := time.Now()
	got, err := l.tryLock(ctx, key)
	if err == nil && !got.ok && l.leaseTTL > 0 && !got.ours {
		var ended bool
		if ended, err = l.endStale(ctx, key); err == nil && ended {
			start = time.Now()
			got, err = l.tryLock(ctx, key)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("locks: try acquire: %w", err)
	}
	if !got.ok {
		return nil, ErrLockBusy
	}
	got.lk.start(start)
	if got.pid != got.conn.PgConn().PID() {
		l.poolerOnce.Do(func() {
			l.logger.Warn("locks: a connection pooler stands between syncer and PostgreSQL (the server's pid is not the one announced): "+
				"the holder session's TCP keepalives cannot be had (they act on the pooler's server connection, not on syncer's), "+
				"so a vanished daemon machine frees its locks only when the pooler notices"+l.leaseNote(),
				slog.Uint64("server_pid", uint64(got.pid)), slog.Uint64("announced_pid", uint64(got.conn.PgConn().PID())))
		})
	}
	return got.lk, nil
}

func (l *Locker) leaseNote() string {
	if l.leaseTTL > 0 {
		return " or its lease runs out (" + l.leaseTTL.String() + ")"
	}
	return ""
}

// Warm opens the holder session, so that the first jobs after a start
// find it open. A session that cannot be opened is left to the first try,
// which reports its error.
func (l *Locker) Warm(ctx context.Context) {
	if l.leasesOnly {
		return
	}
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	if _, err := l.holderConn(ctx); err != nil {
		l.logger.DebugContext(ctx, "locks: open the holder session", slog.String("error", err.Error()))
	}
}

// Close ends the holder session once no lock is held on it (at once when
// none is), and closes the Locker's own pool then. Locks already taken
// are not affected until they are released or lost.
func (l *Locker) Close() {
	l.h.mu.Lock()
	l.h.closed = true
	empty := len(l.h.locks) == 0
	l.h.mu.Unlock()
	if empty {
		l.closeHolder()
	}
}

// closeHolder ends the holder session and the Locker's own pool.
func (l *Locker) closeHolder() {
	l.h.mu.Lock()
	conn := l.h.conn
	l.h.conn = nil
	l.h.mu.Unlock()
	if conn != nil {
		closeConn(conn)
	}
	if l.ownPool {
		l.poolMu.Lock()
		if l.pool != nil {
			l.pool.Close()
		}
		l.poolClosed = true
		l.poolMu.Unlock()
	}
}

// txPool returns the pool of the locks' transactions, opening the
// Locker's own on first use.
func (l *Locker) txPool() (*pgxpool.Pool, error) {
	l.poolMu.Lock()
	defer l.poolMu.Unlock()
	if l.pool != nil {
		return l.pool, nil
	}
	if l.poolClosed {
		return nil, errors.New("locks: locker closed")
	}
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, fmt.Errorf("locks: pool: %w", err)
	}
	pc.ConnConfig = l.connConfig.Copy()
	pc.MaxConns = TxConnsDefault
	database.NoCancelRequests(pc)
	if l.pool, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
		return nil, fmt.Errorf("locks: pool: %w", err)
	}
	return l.pool, nil
}

func (l *Locker) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := database.Connect(ctx, l.connConfig)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// closeConn closes a holder session that is being given up, even when the
// caller's context is already cancelled. It first drops every advisory
// lock the session holds: through a pooler in session mode whose
// server_reset_query does not (an empty one), the server session, and the
// locks with it, would otherwise outlive the client in the pooler's pool.
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

// unlockAllTimeout bounds the unlock before a holder session is closed: a
// session that does not answer is closed anyway.
const unlockAllTimeout = time.Second
