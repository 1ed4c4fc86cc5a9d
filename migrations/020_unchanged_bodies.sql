-- No request for an unchanged row (issue 45; docs/protocol.md, "A body the
-- third party already has"). Per feed (resources, or a configured source's
-- name) and key, a digest of the body the third party last accepted, as the
-- destination renders it (its URL, format and settings are in the digest):
-- a version whose body has the same digest is settled as skipped, marked
-- as accepted, without a request. internal/unchanged owns both tables.
--
-- UNLOGGED: the digests are a cache whose loss only costs requests. A
-- crash empties the table (PostgreSQL truncates an unlogged table in
-- recovery, never leaving it half-written), and so does a promoted
-- standby: every key is then sent again, nothing is skipped wrongly. What
-- WAL the marking transaction would write for 500 digests a batch was most
-- of what they cost the drain.
CREATE UNLOGGED TABLE IF NOT EXISTS {{schema}}.syncer_accepted_bodies (
    feed   text  NOT NULL,
    key    text  NOT NULL,
    digest bytea NOT NULL,
    PRIMARY KEY (feed, key)
);

-- How many versions each feed settled as skipped, for status.
CREATE TABLE IF NOT EXISTS {{schema}}.syncer_skips (
    feed    text        PRIMARY KEY,
    skipped bigint      NOT NULL DEFAULT 0,
    last_at timestamptz NOT NULL DEFAULT now()
);
