// Package locks gives a process exclusive ownership of a named job across
// every process and machine that shares one PostgreSQL database, using
// session-level advisory locks.
//
// # What holding a lock means
//
// A *Lock is held by exactly one PostgreSQL session: a connection the Locker
// opened with pgx.ConnectConfig and uses for its locks alone. It is never
// taken from or returned to a pool, because a pool would hand the locked
// session to other code, and because a session advisory lock lives exactly as
// long as its session: the server frees it when the session ends, however it
// ends (a crash of the process, pg_terminate_backend, a dead network). The
// Locker keeps one idle session between tries: a busy try leaves it idle, and
// Release unlocks and gives it back, so a daemon that tries a busy lock for
// hours keeps one session instead of opening one a try.
// The dedicated session sets server-side TCP keepalives
// (tcp_keepalives_idle=10, tcp_keepalives_interval=5, tcp_keepalives_count=3),
// with set_config once connected (a pooler refuses them in the startup
// packet), so the server notices a vanished client machine within about 25
// seconds and frees the lock for another daemon. Before a lock session is
// closed it drops every advisory lock it holds, for a pooler that would keep
// the server session without resetting it.
//
// # What loss means
//
// A lock is lost when its session is gone or the server no longer lists it in
// pg_locks for that session. The Lock finds out in three ways: a self-check
// every Config.CheckInterval while nobody uses the connection, a check at the
// start of every WithTx, and any connection error seen by WithTx. On loss,
// Done is closed, Err returns an error wrapping ErrLockLost (and the cause),
// every context from Lock.Context is cancelled, the connection is closed and
// one warning is logged. Loss is final: take a new lock to continue.
//
// Between two checks a process can believe it holds a lock that is already
// gone; no polling can close that window. That is why writes whose
// correctness depends on the lock (the sync job's "synced" marks) go through
// Lock.WithTx: they run in one transaction on the locked session itself, after
// checking in that transaction that the session holds the lock. A session
// advisory lock can only disappear when its own session unlocks it or ends,
// and a session that has ended cannot commit. So a committed WithTx is a
// transaction that ran while the lock was held, and when the lock is lost
// WithTx returns an error wrapping ErrLockLost and nothing it wrote is
// committed. (If the connection dies during COMMIT itself, the outcome of that
// one commit is unknown, as for any database client, but a commit that took
// effect was still made by the lock's session.) Work outside the database,
// such as an HTTP push, should run under Lock.Context so it is abandoned as
// soon as loss is known.
//
// # Leases
//
// A holder frozen alive (SIGSTOP, a paused VM) keeps its session, and the
// kernel answers keepalives for it: without more, it would hold the lock for
// as long as it stays frozen. With Config.Lease every lock is leased: the
// statement that takes the lock writes the holder's row in
// syncer_lock_leases (key, server pid, expiry by the database's clock,
// LeaseTTL), and a session of the Locker's own renews it every fifth of
// LeaseTTL, only while it has not run out and the pid still holds the lock.
// A try that finds the lock held under a lease that ran out marks the lease
// run out for good, under its row lock, ends the holder's session with
// pg_terminate_backend (a role may end its own sessions; another role needs
// pg_signal_backend) and tries again. HeldLive counts such a holder as none.
//
// The holder trusts its lease for four fifths of LeaseTTL after a renewal (or
// the try) began, by its own monotonic clock: the database wrote the expiry
// no earlier, so the holder stops trusting the lock a fifth of LeaseTTL
// before any waiter may end its session. Lock.Check compares the clocks and
// asks nothing of the database; anything sent on the lock's behalf outside
// the database (an HTTP request) calls it, through CheckContext, just before
// it goes. Past the deadline Check fails and the lock is lost. What no lease
// can close is a freeze between the check and the write to the socket.
//
// # Connection poolers
//
// Session advisory locks need a real session. Behind a connection pooler in
// transaction mode (PgBouncer with pool_mode=transaction, and similar), each
// statement may run on a different server connection: the lock is taken on one
// server session and then "vanishes" while the connection still answers. The
// self-check detects this, reports the lock lost and logs a warning naming
// the cause; syncer's commands refuse such a pooler at start
// (database.DetectPooling). Connect the Locker directly to PostgreSQL or
// through a pooler in session mode. A Lock's PID is the server's (a pooler
// announces a pid of its own), and the Locker says once, when it sees a
// pooler, that the keepalives above cannot be had through it.
//
// # Keys
//
// Key maps a namespace and a name to the int64 used by pg_advisory_lock: the
// first 8 bytes of SHA-256(namespace + "\x00" + name), read as a big-endian
// two's-complement int64. Key("syncer", "sync") is -5013926935954665390. Other
// tools can compute the same key; in SQL:
//
//	SELECT ('x' || encode(substring(sha256(
//	    convert_to('syncer', 'UTF8') || '\x00'::bytea || convert_to('sync', 'UTF8'))
//	    FROM 1 FOR 8), 'hex'))::bit(64)::bigint;
//
// and in Ruby: Digest::SHA256.digest("syncer\0sync")[0, 8].unpack1("q>").
// In pg_locks a bigint key k appears as classid = k>>32 and objid =
// k&0xffffffff (both unsigned 32-bit) with objsubid = 1; HolderOf queries it
// that way.
//
// The package owns every key syncer uses: ExportKey and RelayKey (per
// schema) and MigrateKey (fixed).
package locks
