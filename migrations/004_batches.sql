-- The installation's identity. It salts every Idempotency-Key, so two
-- installations (two schemas, staging and production) sending the same ids
-- and versions to one third party never share a key, and a key-honouring
-- third party never answers one installation with the other's cached
-- answer. Random, made once, never changed.
CREATE TABLE {{schema}}.syncer_installation (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    id         text        NOT NULL DEFAULT gen_random_uuid()::text,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {{schema}}.syncer_installation DEFAULT VALUES;

-- Batches recorded before their push and not yet marked: the exact request
-- body and its key. After a crash the next holder of the export lock sends
-- these very bytes again under the same key before anything else, so one
-- key always names one body, whatever changed in resources meanwhile. A row
-- is written once per batch and deleted in the transaction that marks it,
-- so it never outlives its batch.
-- It replaces syncer_checkpoints.inflight, which held ids and versions only.
CREATE TABLE {{schema}}.syncer_batches (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    checkpoint  text        NOT NULL,
    key         text        NOT NULL,
    salt        text        NOT NULL,
    items       integer     NOT NULL,
    body        bytea       NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX syncer_batches_checkpoint_idx ON {{schema}}.syncer_batches (checkpoint, seq);

-- The body arrives compressed by syncer (internal/checkpoint): PostgreSQL
-- need not try again.
ALTER TABLE {{schema}}.syncer_batches ALTER COLUMN body SET STORAGE EXTERNAL;
