-- The row's story (issue 45; docs/operations.md, "Where is my row"): for
-- every exported version of a key, each attempt to send it and how it was
-- settled, kept for a retention. internal/history owns every statement on
-- it.
--
-- One row per item per event: an attempt (a request that carried the
-- item, with its answer) or a settlement without a request (skipped as
-- unchanged, failed as too large). The exporter writes a batch's rows in
-- the transaction that marks the batch and forgets its record
-- (internal/exporter/marker.go), in one statement; attempts that end the
-- push with a wait (a 429's pause, transient failures past the retry
-- bound) are written when they happen. A version superseded by a newer one
-- is not written: a lookup reads it from the newer version's rows.
--
-- UNLOGGED: the story is a diagnosis, not a record syncer's guarantees
-- rest on, and what WAL 500 entries a batch would write (and the marking
-- transaction flush) was most of what they cost the drain (as for
-- syncer_accepted_bodies, migration 020). A crash of PostgreSQL (not a
-- clean shutdown) empties the table, and a promoted standby has none of
-- it: the stories begin again from there. docs/design.md says why.
--
-- One btree to find a key's story; a BRIN index on the time to prune by
-- age: entries arrive in time order, so a block range's times are close
-- together, and the BRIN index costs the writes next to nothing.
CREATE UNLOGGED TABLE IF NOT EXISTS {{schema}}.syncer_history (
    -- "resources" or a configured source's name.
    feed        text        NOT NULL,
    -- the key as the wire carries it (a row's id in decimal).
    key         text        NOT NULL,
    version     bigint      NOT NULL,
    -- true for a tombstone (the row was deleted); NULL otherwise.
    deleted     boolean,
    -- when the event happened: the request's start, or the settlement.
    at          timestamptz NOT NULL,
    -- when the version was read into its batch.
    batched_at  timestamptz,
    -- the request's Idempotency-Key: the batch's, or a split half's.
    batch_key   text,
    destination text,
    -- for a source with a tenant column (issue 43); NULL otherwise.
    tenant      text,
    -- the answer's HTTP status; 0 when none came (timeout, connection).
    status      smallint,
    latency_ms  integer,
    -- accepted, failed, deferred, skipped, or, for an attempt that did
    -- not settle the version: rate-limited, retried, split.
    outcome     text        NOT NULL,
    -- the third party's reason for a refusal, cut to a bound.
    reason      text
) WITH (
    -- Pruned from its old end all the time: vacuum it early, so the space
    -- is reused rather than the table growing.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000
);
-- (feed, key) only: a key's few entries are sorted when read, and the
-- narrower entries cost the writes less.
CREATE INDEX IF NOT EXISTS syncer_history_key_idx ON {{schema}}.syncer_history (feed, key);
CREATE INDEX IF NOT EXISTS syncer_history_at_idx ON {{schema}}.syncer_history USING brin (at);
