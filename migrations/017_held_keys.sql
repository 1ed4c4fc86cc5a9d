-- Keys held after a transient answer of their own (issue 42;
-- docs/protocol.md, "A batch settles what it was answered"). A batch's
-- items answered 429/5xx one by one (or a per-item 404/410 where the
-- format says it holds) are not its neighbours' fault: the batch is marked
-- and forgotten, and each such key waits here, at its version, until
-- next_at, when it goes again alone. One row per feed (a checkpoint name:
-- 'live', 'source:<name>') and key; internal/holds owns every statement on
-- it. A new version of the key is not held: its row is ignored and
-- replaced or removed by the next outcome.
CREATE TABLE IF NOT EXISTS {{schema}}.syncer_held_keys (
    feed     text        NOT NULL,
    key      text        NOT NULL,
    version  bigint      NOT NULL,
    reason   text        NOT NULL,
    tries    integer     NOT NULL DEFAULT 1,
    since    timestamptz NOT NULL,
    -- past it the key is shown held: since plus the retry bound
    -- (the destination's MaxElapsed) when it was written.
    held_at  timestamptz NOT NULL,
    next_at  timestamptz NOT NULL,
    PRIMARY KEY (feed, key)
);
