// Package locks gives a process exclusive ownership of a named job across
// every process and machine that shares one PostgreSQL database, using
// session-level advisory locks.
//
// # What holding a lock means
//
// Every lock of a Locker is held by one PostgreSQL session, the holder: a
// connection the Locker opened with database.Connect and uses for its
// locks alone, never taken from or returned to a pool. A daemon's sources,
// lanes and destinations cost it one server connection, not one each
// (issue 58). A session advisory lock lives exactly as long as its
// session: the server frees it when the session ends, however it ends (a
// crash of the process, pg_terminate_backend, a dead network). The holder
// sets server-side TCP keepalives (tcp_keepalives_idle=10,
// tcp_keepalives_interval=5, tcp_keepalives_count=3), with set_config once
// connected (a pooler refuses them in the startup packet), so the server
// notices a vanished client machine within about 25 seconds. Its
// statements (a try, an unlock, a renewal, one check of all its locks) run
// under Config.CheckTimeout, never under a caller's context: one that
// overruns ends the session, and every lock on it is lost. Before it is
// closed it drops every advisory lock it holds, for a pooler that would
// keep the server session without resetting it. Advisory locks are
// reentrant on one session, so the Locker counts its own: a key one of its
// locks holds is busy for its next try.
//
// # What loss means
//
// A lock is lost when the holder session is gone or the server no longer
// lists the lock in pg_locks for it. The Lock finds out in three ways: the
// holder's check of all its locks every Config.CheckInterval, a check in
// every transaction of the lock, and its lease (below). On loss, Done is
// closed, Err returns an error wrapping ErrLockLost (and the cause), every
// context from Lock.Context is cancelled, the lock is unlocked on the
// holder (which keeps the others) and one warning is logged. Loss is
// final: take a new lock to continue.
//
// Between two checks a process can believe it holds a lock that is already
// gone; no polling can close that window. That is why writes whose
// correctness depends on the lock (the sync job's "synced" marks) go through
// Lock.WithTx or a Pipe: they run on a pooled connection, fenced. Each
// transaction first takes the lock's fence (a second advisory key,
// fenceKey) shared, for the transaction, then checks in pg_locks that the
// holder session holds the lock; a try takes the fence exclusive for an
// instant after it took the lock, and gives the lock back at once when the
// fence is busy. So no session is granted the lock while a transaction of
// its former holder runs: a committed WithTx is a transaction no other
// holder's overlapped, and when the lock is lost WithTx returns an error
// wrapping ErrLockLost and nothing it wrote is committed. Work outside the
// database, such as an HTTP push, should run under Lock.Context so it is
// abandoned as soon as loss is known.
//
// # Leases
//
// A holder frozen alive (SIGSTOP, a paused VM) keeps its session, and the
// kernel answers keepalives for it: without more, it would hold the lock for
// as long as it stays frozen. With Config.Lease every lock is leased: the
// statement that takes the lock writes the holder's row in
// syncer_lock_leases (key, server pid, expiry by the database's clock,
// LeaseTTL), and the holder session renews it every fifth of LeaseTTL, only
// while it has not run out and the pid still holds the lock. A try that
// finds the lock, or its fence, held under a lease that ran out marks the
// lease run out for good, under its row lock, ends the holder session and
// the sessions of the transactions holding the fence with
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
// # Leases alone
//
// With Config.LeasesOnly no session holds anything (a pooler in
// transaction mode without SYNCER_DIRECT_URL): the lease row is the lock
// (leaseonly.go). A try inserts the row, or takes over one whose expiry
// passed by the database's clock (clock_timestamp()), with a random token
// of the new Lock as its holder; one statement renews every lease of the
// Locker every fifth of LeaseTTL, only rows still carrying their token;
// a release deletes the row. Each transaction of the lock (WithTx, a
// Pipe's, which is then stateless) locks the row FOR SHARE if it still
// carries the token and has not run out, and sets its own
// idle_in_transaction_session_timeout (LeaseTTL/2) and statement_timeout
// (LeaseTTL), transaction-local. FOR SHARE, not FOR KEY SHARE: a taker's
// ON CONFLICT DO UPDATE changes no key column, and its row lock conflicts
// with SHARE only. So no taker writes its token while a transaction of the
// former holder runs, and a frozen one ends by its own idle timeout. The
// holder's deadline and Check are the leases' above; HolderOf and HeldLive
// read the row. Nothing is ended with pg_terminate_backend.
//
// # Connection poolers
//
// Session advisory locks need a real session. Behind a connection pooler in
// transaction mode (PgBouncer with pool_mode=transaction, and similar), each
// statement may run on a different server connection: the lock is taken on
// one server session and then "vanishes" while the connection still
// answers. The holder's check detects this, reports the lock lost and logs
// a warning naming the cause. So the holder session must be a whole one:
// the Locker's connConfig leads to PostgreSQL directly or through a pooler
// in session mode (SYNCER_DIRECT_URL when DATABASE_URL goes through a
// transaction pooler; without it, leases alone, above). The
// transactions' pool (Config.Pool) may go through
// a transaction pooler: the fence is a transaction-level lock, and with
// Config.Stateless a Pipe leaves nothing on a session (pipe_stateless.go).
// A Lock's PID is the server's (a pooler announces a pid of its own), and
// the Locker says once, when it sees a pooler in front of the holder, that
// the keepalives above cannot be had through it.
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
