-- Keeping the digests of accepted bodies (issue 45, internal/unchanged),
-- cheaper for the keys that have none yet. An upsert of a batch's digests
-- (INSERT ... ON CONFLICT DO UPDATE) costs PostgreSQL about twice a plain
-- insert's work a row: a probe of the primary key before the insert and a
-- speculative insertion confirmed after it. Most digests written are new
-- (a drain of new rows writes one a row, none of which exists), and the
-- exporter knows which keys had none when it read them (the pending read
-- returns each key's digest), so it inserts those plainly. A key that got
-- one since (a replay of resources marking the same key, a digest written
-- by a batch marked after the read) makes the insert fail on the primary
-- key: the subtransaction rolls it back and the upsert writes them all.
-- The keys that had a digest are upserted directly.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_keep_digests(p_feed text, p_keys text[], p_digests bytea[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        INSERT INTO {{schema}}.syncer_accepted_bodies (feed, key, digest)
        SELECT p_feed, n.key, n.digest FROM unnest(p_keys, p_digests) AS n (key, digest);
    EXCEPTION WHEN unique_violation THEN
        INSERT INTO {{schema}}.syncer_accepted_bodies AS b (feed, key, digest)
        SELECT p_feed, n.key, n.digest FROM unnest(p_keys, p_digests) AS n (key, digest)
        ON CONFLICT (feed, key) DO UPDATE SET digest = EXCLUDED.digest;
    END;
END
$$;
