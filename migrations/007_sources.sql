-- Sources: the application's own tables, exported as configured in
-- SYNCER_CONFIG. See docs/sources.md. `syncer migrate --config` installs,
-- per source, triggers on the application's table that append to
-- syncer_changes; nothing here adds a column to an application's table.

-- One row per installed source, written by `syncer migrate` only (and the
-- snapshot's progress by the daemon). The application's table, key and
-- columns are recorded as they were resolved at install time, so the
-- daemon reads exactly the table the triggers were put on.
CREATE TABLE {{schema}}.syncer_sources (
    name                text PRIMARY KEY,
    schema_name         text        NOT NULL,
    table_name          text        NOT NULL,
    key_column          text        NOT NULL,
    key_kind            text        NOT NULL CHECK (key_kind IN ('integer', 'text', 'uuid')),
    key_type            text        NOT NULL,
    columns             text[],
    destination         text        NOT NULL,
    snapshot_state      text        NOT NULL DEFAULT 'pending'
                        CHECK (snapshot_state IN ('pending', 'running', 'done', 'skipped')),
    snapshot_after      text,
    snapshot_rows       bigint      NOT NULL DEFAULT 0,
    snapshot_total      bigint      NOT NULL DEFAULT 0,
    snapshot_started_at timestamptz,
    snapshot_done_at    timestamptz,
    -- Why the daemon stopped exporting the source (its table no longer
    -- matches its configuration); NULL while it exports.
    error               text,
    error_at            timestamptz,
    installed_at        timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

-- The change log of every source: one row per row written, appended by the
-- source's triggers in the writer's transaction (so a rolled-back write
-- logs nothing). seq is one global sequence without a cache, so for one key
-- the order of seq is the order of commits (writers of one key serialise on
-- its row lock), and the version of an item, the highest seq of its key's
-- changes, only increases, across deletes and re-inserts too.
--
-- num is the key as a bigint for integer keys (0 for text and uuid keys),
-- so that integer keys are read in numeric order from the index; key is the
-- key's text form, in byte order (collation "C") for text and uuid keys.
-- deleted says what the writer did; whether an item is a tombstone is
-- decided when it is read, by whether the row still exists.
CREATE TABLE {{schema}}.syncer_changes (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source     text        NOT NULL,
    num        bigint      NOT NULL DEFAULT 0,
    key        text        COLLATE "C" NOT NULL,
    deleted    boolean     NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now()
) WITH (
    -- A queue: rows are deleted soon after they are written, so vacuum it
    -- early rather than at a fifth of its size.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000
);
CREATE INDEX syncer_changes_key_idx ON {{schema}}.syncer_changes (source, num, key, seq);

-- Keys whose version the third party rejected. Their changes up to that
-- version are deleted with the failure, so a key is pending again only when
-- a later change arrives (or `retry-failed` re-queues it). A failure row
-- whose key is pending again is stale: it is replaced when that version is
-- marked, and is not counted as failed meanwhile.
CREATE TABLE {{schema}}.syncer_source_failures (
    source    text        NOT NULL,
    key       text        COLLATE "C" NOT NULL,
    num       bigint      NOT NULL DEFAULT 0,
    version   bigint      NOT NULL,
    error     text        NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, key)
);

-- The capture functions (internal/sources) append to syncer_outbox through
-- the gate of 002_outbox.sql, with op 'source:<name>'.
