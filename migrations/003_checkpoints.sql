-- Where each export job is. Written in the same transaction as the marks of
-- each batch, on the connection that holds the export lock. For the live sync
-- last_id is progress information only, never a high-water mark: a row with
-- a lower id can commit after a higher one was exported.
--
-- inflight: the batches pushed or about to be pushed and not yet marked (a
-- few: the exporter marks while it pushes), each with its key, salt, ids and
-- versions, recorded before its push, so that after a crash the same rows go
-- again as the same batches, with the same Idempotency-Keys. It is written
-- with every mark, so it is packed (see internal/checkpoint): as JSON it cost
-- a quarter of each mark's time.
CREATE TABLE {{schema}}.syncer_checkpoints (
    name              text PRIMARY KEY,
    last_id           bigint      NOT NULL DEFAULT 0,
    rows_done         bigint      NOT NULL DEFAULT 0,
    batches_done      bigint      NOT NULL DEFAULT 0,
    rows_failed       bigint      NOT NULL DEFAULT 0,
    inflight          bytea       NOT NULL DEFAULT '',
    inflight_batches  integer     NOT NULL DEFAULT 0,
    started_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- A manual re-export. Its progress is its checkpoint, named 'replay:<id>'.
CREATE TABLE {{schema}}.syncer_replays (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    from_id      bigint,
    to_id        bigint,
    since        timestamptz,
    until        timestamptz,
    failed_only  boolean     NOT NULL DEFAULT false,
    total_rows   bigint      NOT NULL,
    state        text        NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'running', 'done', 'cancelled')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);

-- Small shared facts about the push path that every daemon must see: the
-- circuit breaker's state (gobreaker's shared store) and whether the third
-- party refused our credentials.
CREATE TABLE {{schema}}.syncer_state (
    key        text PRIMARY KEY,
    value      bytea       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The live sync's key salt. retry-failed bumps it in the transaction that
-- clears the failures, so a retried row never reuses the Idempotency-Key
-- under which the third party rejected it (a key-honouring third party
-- would replay the rejection). Read in the same statement as each batch.
CREATE TABLE {{schema}}.syncer_generation (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    live      bigint  NOT NULL DEFAULT 0
);
INSERT INTO {{schema}}.syncer_generation DEFAULT VALUES;
