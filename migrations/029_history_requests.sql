-- The row's story, a request at a time (issue 45; docs/design.md, "The
-- row's story"). Most of what the story holds is the common batch: one
-- request that carried every item, all accepted. Written as one entry an
-- item (syncer_history, migration 023), each entry cost PostgreSQL a row
-- and an entry of the key's btree, 2.2 to 2.5 µs, about a seventh of what
-- the drain spends on the item (docs/benchmarks.md, "The row's story").
-- Here such a request is one row, its items as parallel arrays: 0.06 to
-- 0.09 µs an item. syncer_history keeps every other entry (a 429, a
-- split, a rejection, a skip), which are few.
--
-- A key's story is found through a GIN index of the requests' keys, with
-- its pending list on: an insert appends the row's keys to the list
-- (0.27 µs an item) rather than placing each in the index's tree, and a
-- lookup reads the list whole beside the tree. internal/history's Pruner
-- moves the list into the tree (syncer_history_tidy) once the export
-- is quiet, or when enough requests came since; gin_pending_list_limit
-- (32 MB, about a million keys) bounds it if the Pruner runs nowhere, by
-- flushing it in the insert that passes it.
--
-- UNLOGGED, as syncer_history and for the same reasons (migration 023).
CREATE UNLOGGED TABLE IF NOT EXISTS {{schema}}.syncer_history_requests (
    -- "resources" or a configured source's name.
    feed        text        NOT NULL,
    -- the request's start.
    at          timestamptz NOT NULL,
    -- when its versions were read into their batch.
    batched_at  timestamptz,
    -- the request's Idempotency-Key.
    batch_key   text        NOT NULL,
    destination text,
    -- for a source with a tenant column (issue 43); NULL otherwise.
    tenant      text,
    status      smallint    NOT NULL,
    latency_ms  integer     NOT NULL,
    -- the items, in the request's order: a key appears once.
    keys        text[]      NOT NULL,
    versions    bigint[]    NOT NULL,
    -- true for a tombstone; NULL when the request carried none.
    deleted     boolean[],
    -- when each version was captured (feed.Item.Captured); NULL when the
    -- read did not say, or an element NULL for an item it did not.
    captured    timestamptz[],
    -- cardinality(keys): what the size bound counts.
    items       integer     NOT NULL
) WITH (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200
);
-- The arrays are stored uncompressed: they are read a row at a time, and
-- compressing a few kilobytes cost the insert a third of its time.
ALTER TABLE {{schema}}.syncer_history_requests
    ALTER COLUMN keys SET STORAGE EXTERNAL,
    ALTER COLUMN versions SET STORAGE EXTERNAL,
    ALTER COLUMN captured SET STORAGE EXTERNAL;
CREATE INDEX IF NOT EXISTS syncer_history_requests_keys_idx ON {{schema}}.syncer_history_requests
    USING gin (keys) WITH (fastupdate = on, gin_pending_list_limit = 32768);
CREATE INDEX IF NOT EXISTS syncer_history_requests_at_idx ON {{schema}}.syncer_history_requests USING brin (at);

-- The Pruner's tidy, as the schema's owner: gin_clean_pending_list is
-- the index owner's (or a superuser's), and the daemon runs as a role
-- that owns nothing (docs/operations.md, "Roles and privileges").
-- Executable by anyone, as functions are by default: all it does is what
-- autovacuum would do later.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_history_tidy() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_catalog.gin_clean_pending_list(({{schema_literal}} || '.syncer_history_requests_keys_idx')::pg_catalog.regclass)
$$;

-- The capture time of an entry (feed.Item.Captured).
ALTER TABLE {{schema}}.syncer_history ADD COLUMN IF NOT EXISTS captured_at timestamptz;
