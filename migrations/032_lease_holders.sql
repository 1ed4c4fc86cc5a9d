-- Locks as leases alone (internal/locks, "Leases alone"): through a
-- transaction pooler without SYNCER_DIRECT_URL no session may hold an
-- advisory lock, so the row is the lock. holder is the token of the Lock
-- that took it (a random one per take: a former holder's fence, even of
-- the same daemon, fails once the row is someone else's); holder_name is
-- the taking daemon's application_name, for status. Both stay NULL for a
-- lock held by a session advisory lock (011), whose pid says who holds it.
ALTER TABLE {{schema}}.syncer_lock_leases
    ADD COLUMN IF NOT EXISTS holder      text,
    ADD COLUMN IF NOT EXISTS holder_name text;
