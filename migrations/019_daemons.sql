-- A pause that holds when the command returns (issue 45; docs/operations.md,
-- "Pausing a destination"). Every running daemon says, every half second,
-- which generation of each destination's pause (or resume) it holds; `syncer
-- pause` waits until every daemon alive holds the generation it wrote, or
-- names those that did not. internal/presence owns the table,
-- internal/breakerstore the sequence (a hold's generation, written with it).
CREATE TABLE IF NOT EXISTS {{schema}}.syncer_daemons (
    daemon      text        NOT NULL,
    destination text        NOT NULL,
    -- the generation of the destination's hold this daemon holds: its
    -- deliverer refuses every request the hold forbids before it says so
    generation  bigint      NOT NULL,
    -- alive until then (the database's clock); a daemon that stops saying
    -- so is not waited for past it
    seen_until  timestamptz NOT NULL,
    PRIMARY KEY (daemon, destination)
);

CREATE SEQUENCE IF NOT EXISTS {{schema}}.syncer_hold_generation;
