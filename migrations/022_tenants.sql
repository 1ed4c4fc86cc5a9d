-- Tenants (issue 43; docs/protocol.md section 10, "Tenants"): a source may
-- name the column that says whose a row is. Its changes carry the row's
-- tenant at write time and the lane the tenant hashes to (the capture
-- function computes it: see internal/sources, laneSQL), so one lane's
-- read finds its tenants, and each tenant's keys, through one index. A
-- source without tenants writes NULL in both and is read as before.
ALTER TABLE {{schema}}.syncer_sources
    ADD COLUMN IF NOT EXISTS tenant_column text,
    ADD COLUMN IF NOT EXISTS lanes integer NOT NULL DEFAULT 0;

ALTER TABLE {{schema}}.syncer_changes
    ADD COLUMN IF NOT EXISTS tenant text COLLATE "C",
    ADD COLUMN IF NOT EXISTS lane integer;

-- A lane's tenants in order (a skip scan: the next tenant after the last
-- served), and one tenant's keys in order with their highest seq. Partial:
-- the changes of sources without tenants are not in it.
CREATE INDEX IF NOT EXISTS syncer_changes_lane_idx ON {{schema}}.syncer_changes (source, lane, tenant, num, key, seq)
    WHERE tenant IS NOT NULL;

-- A failure is a (tenant, key)'s: retry-failed logs the key again for the
-- tenant it failed for.
ALTER TABLE {{schema}}.syncer_source_failures
    ADD COLUMN IF NOT EXISTS tenant text COLLATE "C";
