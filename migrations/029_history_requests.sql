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
-- A key's story is found through a GIN index of the requests' keys, but
-- not at once: indexing a key costs about what its entry did, and even a
-- GIN pending list's append cost 0.27 µs an item, 2% of the drain. The index is partial (the
-- rows marked indexed); a request is written unmarked, found meanwhile
-- through a small btree of the unmarked rows and a look at their arrays,
-- and internal/history's Pruner marks the unmarked rows (which indexes
-- their keys) once the export is quiet, or when enough of them wait.
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
    -- the items, in the request's order: a key appears once. COLLATE
    -- "C": the index compares bytes, a quarter cheaper than the
    -- database's collation, and equality is the same.
    keys        text[]      COLLATE "C" NOT NULL,
    versions    bigint[]    NOT NULL,
    -- true for a tombstone; NULL when the request carried none.
    deleted     boolean[],
    -- when each version was captured (feed.Item.Captured); NULL when the
    -- read did not say, or an element NULL for an item it did not.
    captured    timestamptz[],
    -- cardinality(keys): what the size bound counts.
    items       integer     NOT NULL,
    -- whether the keys are in the GIN index yet (the Pruner's to set).
    indexed     boolean     NOT NULL DEFAULT false
) WITH (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200,
    -- No autoanalyze: it would read the sampled requests' arrays for
    -- statistics no statement uses (a lookup goes through the key
    -- indexes, a prune through the time's).
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 2000000000
);
-- The arrays are stored uncompressed: they are read a row at a time, and
-- compressing a few kilobytes cost the insert a third of its time.
ALTER TABLE {{schema}}.syncer_history_requests
    ALTER COLUMN keys SET STORAGE EXTERNAL,
    ALTER COLUMN versions SET STORAGE EXTERNAL,
    ALTER COLUMN captured SET STORAGE EXTERNAL;
-- fastupdate off: the Pruner's marking places the keys in the tree
-- directly, rather than in a pending list a lookup would read whole.
CREATE INDEX IF NOT EXISTS syncer_history_requests_keys_idx ON {{schema}}.syncer_history_requests
    USING gin (keys) WITH (fastupdate = off) WHERE indexed;
CREATE INDEX IF NOT EXISTS syncer_history_requests_unindexed_idx ON {{schema}}.syncer_history_requests (at)
    WHERE NOT indexed;
CREATE INDEX IF NOT EXISTS syncer_history_requests_at_idx ON {{schema}}.syncer_history_requests USING brin (at);

-- The capture time of an entry (feed.Item.Captured).
ALTER TABLE {{schema}}.syncer_history ADD COLUMN IF NOT EXISTS captured_at timestamptz;
