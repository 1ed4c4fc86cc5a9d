-- The digest of the body the third party last accepted for a row of
-- resources is kept on the row (issues 55 and 57; docs/design.md, "A
-- resources row keeps its accepted digest"), written by the UPDATE that
-- marks it synced, read by the pending read from the tuple it reads
-- anyway: no insert into syncer_accepted_bodies a row, which was 4-5 µs
-- of a drain's 11-13 in the marks. internal/resources owns both columns;
-- configured sources keep syncer_accepted_bodies (internal/unchanged).
--
-- ADD COLUMN without a default rewrites nothing: a catalog change under a
-- brief lock. The columns are logged with their rows: a digest is written
-- in the transaction that marks its version, so after a crash or on a
-- promoted standby it is as true as the synced_at beside it.
ALTER TABLE {{schema}}.resources ADD COLUMN IF NOT EXISTS accepted_digest bytea;
ALTER TABLE {{schema}}.syncer_tombstones ADD COLUMN IF NOT EXISTS accepted_digest bytea;

-- The digests resources kept in the table are not copied to the rows:
-- that would rewrite every synced row of resources in this migration (its
-- WAL, its dead tuples, its row locks against the writers). Each key with
-- one costs at most one request instead: its next version with the body
-- the third party already has is sent, not skipped. A digest is a cache
-- whose loss only costs requests (migration 020).
DELETE FROM {{schema}}.syncer_accepted_bodies WHERE feed = 'resources' AND tenant = '';

-- The last accepted body of an id goes with it between its row and its
-- tombstone: a delete carries the row's digest to the tombstone, an
-- insert that brings the id back carries the tombstone's to the row. So a
-- key deleted again before its return went out is not sent again (the
-- third party holds its delete), and a tombstone never compares with a
-- digest older than the row's last accepted body. The bodies are 030's
-- otherwise. A tombstone that is there already (ON CONFLICT) keeps none:
-- which of the two digests is the later is not known, and none sends.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_resources_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    syncer_open boolean;
    syncer_back boolean;
BEGIN
    SELECT {{gate_open}},
           EXISTS (SELECT FROM inserted_rows n JOIN {{schema}}.syncer_tombstones t ON t.id OPERATOR(pg_catalog.=) n.id)
      INTO syncer_open, syncer_back;
    IF syncer_open AND NOT COALESCE(pg_catalog.current_setting({{signalled}}, true) OPERATOR(pg_catalog.=) 'on', false) THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES ('INSERT');
        PERFORM pg_catalog.pg_notify({{channel}}, '');
        PERFORM pg_catalog.set_config({{signalled}}, 'on', true);
    END IF;
    IF syncer_back THEN
        WITH gone AS (
            DELETE FROM {{schema}}.syncer_tombstones t USING inserted_rows n
            WHERE t.id OPERATOR(pg_catalog.=) n.id
            RETURNING t.id, t.version, t.accepted_digest
        )
        UPDATE {{schema}}.resources r SET version = r.version OPERATOR(pg_catalog.+) gone.version,
            accepted_digest = gone.accepted_digest
        FROM gone WHERE r.id OPERATOR(pg_catalog.=) gone.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.syncer_resources_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    syncer_open boolean;
BEGIN
    WITH tombstones AS (
        INSERT INTO {{schema}}.syncer_tombstones AS t (id, version, created_at, accepted_digest)
        SELECT id, version OPERATOR(pg_catalog.+) 1, created_at, accepted_digest FROM deleted_rows
        ON CONFLICT (id) DO UPDATE
            SET version    = greatest(t.version OPERATOR(pg_catalog.+) 1, EXCLUDED.version),
                created_at = EXCLUDED.created_at,
                deleted_at = pg_catalog.now(),
                synced_at  = NULL,
                failed_at  = NULL,
                sync_error = NULL,
                accepted_digest = NULL
    )
    SELECT {{gate_open}} INTO syncer_open;
    IF syncer_open AND NOT COALESCE(pg_catalog.current_setting({{signalled}}, true) OPERATOR(pg_catalog.=) 'on', false) THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES ('DELETE');
        PERFORM pg_catalog.pg_notify({{channel}}, '');
        PERFORM pg_catalog.set_config({{signalled}}, 'on', true);
    END IF;
    RETURN NULL;
END
$$;

-- A daemon of the previous release, during a rolling upgrade, still keeps
-- resources' digests in syncer_accepted_bodies and does not write the
-- rows'. What it writes there is taken out at the end of its statement,
-- and the digests on the rows of those keys with it: it then never skips
-- a row of resources (it finds no digest), and a daemon of this release
-- never compares with a digest older than a body the previous one had
-- accepted. Deferred to the commit: its marks and its digests are pieces
-- of one statement, and a trigger that updated a row before the
-- statement's other piece did failed the statement ("already modified by
-- an operation triggered by the current command"). Only that release's
-- statements fire it: this one writes no digest of resources there. A
-- later release drops it.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_accepted_bodies_of_resources() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.key ~ '^-?[0-9]{1,19}$' THEN
        UPDATE {{schema}}.resources SET accepted_digest = NULL
        WHERE id = NEW.key::bigint AND accepted_digest IS NOT NULL;
        UPDATE {{schema}}.syncer_tombstones SET accepted_digest = NULL
        WHERE id = NEW.key::bigint AND accepted_digest IS NOT NULL;
    END IF;
    DELETE FROM {{schema}}.syncer_accepted_bodies
    WHERE feed = NEW.feed AND tenant = NEW.tenant AND key = NEW.key;
    RETURN NULL;
END
$$;

-- Named as the migrations name the resources' triggers: syncer_* names a
-- source's capture trigger, which tests look for.
DROP TRIGGER IF EXISTS accepted_bodies_of_resources ON {{schema}}.syncer_accepted_bodies;
CREATE CONSTRAINT TRIGGER accepted_bodies_of_resources
    AFTER INSERT OR UPDATE ON {{schema}}.syncer_accepted_bodies
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.feed = 'resources' AND NEW.tenant = '')
    EXECUTE FUNCTION {{schema}}.syncer_accepted_bodies_of_resources();

-- The previous release's heal (`verify --heal`, by hand or a daemon's
-- background verify) makes rows and tombstones pending at a new version
-- and forgets their digests in the table only: the third party does not
-- hold what the digest says, and a digest left on the row would settle
-- the resent version as skipped. A statement that sets version and leaves
-- the digest as it was (that heal; this release's clears it in the same
-- transaction) clears it. Writers never set version (the new version of a
-- payload is a BEFORE trigger's, which UPDATE OF does not see), the marks
-- never do, and the reinsert sets the digest it carries: none of them
-- fires it. A later release drops it with the table's trigger above.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_version_set_forgets_digest() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.accepted_digest := NULL;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS resources_version_set_forgets_digest ON {{schema}}.resources;
CREATE TRIGGER resources_version_set_forgets_digest
    BEFORE UPDATE OF version ON {{schema}}.resources
    FOR EACH ROW
    WHEN (OLD.accepted_digest IS NOT NULL AND NEW.accepted_digest IS NOT DISTINCT FROM OLD.accepted_digest)
    EXECUTE FUNCTION {{schema}}.syncer_version_set_forgets_digest();

DROP TRIGGER IF EXISTS tombstones_version_set_forgets_digest ON {{schema}}.syncer_tombstones;
CREATE TRIGGER tombstones_version_set_forgets_digest
    BEFORE UPDATE OF version ON {{schema}}.syncer_tombstones
    FOR EACH ROW
    WHEN (OLD.accepted_digest IS NOT NULL AND NEW.accepted_digest IS NOT DISTINCT FROM OLD.accepted_digest)
    EXECUTE FUNCTION {{schema}}.syncer_version_set_forgets_digest();
