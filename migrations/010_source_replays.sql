-- Replays of a configured source (`syncer replay --source NAME`), beside
-- those of resources: one id space, one state machine, one list. A replay
-- whose source is set is a source's: the resources' replay jobs never take
-- it; the source's own job logs its keys, chunk by chunk, into the change
-- log, from which they are exported as any change.
ALTER TABLE {{schema}}.syncer_replays ADD COLUMN source text;

-- A source replay's range and where its logging stands, owned by
-- internal/sources. Keys are in their text form; from_key and to_key are
-- inclusive (integer keys compared as numbers, text and uuid keys in byte
-- order). since and until are on the column the source names as the time
-- of a row's last change (changed_at in the configuration).
CREATE TABLE {{schema}}.syncer_source_replays (
    replay_id      bigint PRIMARY KEY REFERENCES {{schema}}.syncer_replays (id) ON DELETE CASCADE,
    from_key       text,
    to_key         text,
    since          timestamptz,
    until          timestamptz,
    changed_column text,
    -- The last key logged: the next chunk starts after it.
    after_key      text,
    keys_logged    bigint NOT NULL DEFAULT 0,
    -- The highest change logged: the replay's keys are sent once the
    -- source has no change up to it left.
    last_seq       bigint NOT NULL DEFAULT 0
);
