-- Leases of the session advisory locks (internal/locks, "Leases"): the
-- holder of a lock renews its row every few seconds; a daemon that finds
-- the lock held under a lease that ran out (by the database's clock) ends
-- the holder's session, which frees the lock, and takes it. A frozen holder
-- (SIGSTOP, a paused VM, a stop-the-world stall) keeps its session alive,
-- since the kernel still answers for it, and used to stall the export for
-- as long as it stayed frozen. One row per lock key; pid is the server pid
-- of the holding session, as pg_locks shows it.
CREATE TABLE IF NOT EXISTS {{schema}}.syncer_lock_leases (
    key        bigint      PRIMARY KEY,
    pid        integer     NOT NULL,
    expires_at timestamptz NOT NULL
);
