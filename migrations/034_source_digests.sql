-- The configured sources' digests of accepted bodies (issue 57; docs/
-- design.md, "A configured source's digests are found by a bigint"), in a
-- table of their own keyed by a bigint: slot, a 64-bit hash of the feed
-- and the key (internal/unchanged, SlotSQL). The pending read probes it
-- once a key and the marks insert into it once a key: under
-- syncer_accepted_bodies' primary key (feed, tenant, key), three texts
-- compared under the database's collation at every step of a B-tree
-- descent, the probe and the insert were 4-5 µs of a drain's 11 a row.
--
-- A slot holds one (feed, tenant, key) at a time: the probe compares the
-- three stored beside the digest, so two keys whose hashes collide, or a
-- key whose row moved to another tenant, find no digest of the other's
-- and are sent, never skipped for a body the third party does not hold.
-- The last accepted of them owns the slot. feed, tenant and key are "C":
-- equality is byte equality under any deterministic collation, and the
-- change log's keys are "C" already.
--
-- UNLOGGED, as 020's table: a cache whose loss only costs requests.
CREATE UNLOGGED TABLE IF NOT EXISTS {{schema}}.syncer_source_digests (
    slot   bigint NOT NULL PRIMARY KEY,
    feed   text   COLLATE "C" NOT NULL,
    tenant text   COLLATE "C" NOT NULL,
    key    text   COLLATE "C" NOT NULL,
    digest bytea  NOT NULL
);

-- As 026's syncer_keep_digests: a plain insert of keys that had no
-- digest when read, and the upsert only if one of them got one since.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_keep_source_digests(p_feed text, p_tenant text, p_keys text[], p_digests bytea[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        INSERT INTO {{schema}}.syncer_source_digests (slot, feed, tenant, key, digest)
        SELECT pg_catalog.hashtextextended(n.key COLLATE "C", pg_catalog.hashtext(p_feed COLLATE "C")),
            p_feed, p_tenant, n.key, n.digest
        FROM unnest(p_keys, p_digests) AS n (key, digest);
    EXCEPTION WHEN unique_violation THEN
        -- Two keys of the batch in one slot (a collision): one is
        -- kept, as a later batch would overwrite it.
        INSERT INTO {{schema}}.syncer_source_digests AS d (slot, feed, tenant, key, digest)
        SELECT DISTINCT ON (1) pg_catalog.hashtextextended(n.key COLLATE "C", pg_catalog.hashtext(p_feed COLLATE "C")),
            p_feed, p_tenant, n.key, n.digest
        FROM unnest(p_keys, p_digests) AS n (key, digest)
        ON CONFLICT (slot) DO UPDATE SET feed = EXCLUDED.feed, tenant = EXCLUDED.tenant,
            key = EXCLUDED.key, digest = EXCLUDED.digest;
    END;
END
$$;

-- The digests the sources kept in syncer_accepted_bodies are not copied:
-- each costs at most one request (migration 020's cache). Left there,
-- they would be wrong for the previous release during a rolling upgrade:
-- a body this release had accepted since is not in them, and the
-- previous release would skip a version whose body is the older one.
-- So they are deleted, and what the previous release writes there for a
-- source is dropped on its way in: it then finds no digest of a source
-- and skips none. The key's digest in syncer_source_digests goes with
-- it: the previous release accepted a body of the key, and this release
-- must not compare with a digest older than that one. Resources' digests
-- are 033's (its deferred trigger moves them off the table); they pass.
-- A later release drops the trigger with the table.
DELETE FROM {{schema}}.syncer_accepted_bodies WHERE NOT (feed = 'resources' AND tenant = '');

CREATE OR REPLACE FUNCTION {{schema}}.syncer_accepted_bodies_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {{schema}}.syncer_source_digests
    WHERE slot = pg_catalog.hashtextextended(NEW.key COLLATE "C", pg_catalog.hashtext(NEW.feed COLLATE "C"))
        AND feed = NEW.feed COLLATE "C" AND tenant = NEW.tenant COLLATE "C" AND key = NEW.key COLLATE "C";
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS accepted_bodies_moved ON {{schema}}.syncer_accepted_bodies;
CREATE TRIGGER accepted_bodies_moved
    BEFORE INSERT ON {{schema}}.syncer_accepted_bodies
    FOR EACH ROW
    WHEN (NOT (NEW.feed = 'resources' AND NEW.tenant = ''))
    EXECUTE FUNCTION {{schema}}.syncer_accepted_bodies_moved();
