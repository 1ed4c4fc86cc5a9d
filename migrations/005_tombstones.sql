-- Deletes reach the third party as tombstones. See docs/tombstones.md.
--
-- A deleted row leaves a tombstone: its id and a version one above the
-- row's last, pending like a row until the third party accepts it. An id is
-- in resources or here, never in both: a delete moves it here, an insert
-- that brings it back moves it out again, continuing above the tombstone's
-- version. So (id, version) is unique across the two tables, and the
-- versions one id shows the third party only ever increase.
CREATE TABLE {{schema}}.syncer_tombstones (
    id         bigint PRIMARY KEY,
    version    bigint      NOT NULL,
    -- The deleted row's creation time, so `replay --since/--until` (on
    -- creation time) resends the deletes of the rows in its range.
    created_at timestamptz NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now(),
    synced_at  timestamptz,
    failed_at  timestamptz,
    sync_error text
);

-- As for rows: finding work and counting it only touch these.
CREATE INDEX syncer_tombstones_pending_idx ON {{schema}}.syncer_tombstones (id)
    WHERE synced_at IS NULL AND failed_at IS NULL;
CREATE INDEX syncer_tombstones_failed_idx ON {{schema}}.syncer_tombstones (id)
    WHERE failed_at IS NOT NULL;
-- The purge takes the oldest synced tombstones first.
CREATE INDEX syncer_tombstones_synced_idx ON {{schema}}.syncer_tombstones (synced_at)
    WHERE synced_at IS NOT NULL;

-- One statement, one trigger call, whatever it deletes: the deleted rows
-- come in a transition table, and become tombstones in one INSERT, in the
-- deleting transaction (a rolled-back delete leaves none). A tombstone
-- already there (the id was deleted, brought back and deleted again, and the
-- two raced) is moved on, never back.
CREATE FUNCTION {{schema}}.syncer_resources_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.syncer_tombstones AS t (id, version, created_at)
    SELECT id, version + 1, created_at FROM deleted_rows
    ON CONFLICT (id) DO UPDATE
        SET version    = greatest(t.version + 1, EXCLUDED.version),
            created_at = EXCLUDED.created_at,
            deleted_at = now(),
            synced_at  = NULL,
            failed_at  = NULL,
            sync_error = NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER resources_tombstones
    AFTER DELETE ON {{schema}}.resources
    REFERENCING OLD TABLE AS deleted_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{schema}}.syncer_resources_deleted();

-- The event and NOTIFY go through the gate like an insert's: one per
-- statement, not per row.
CREATE TRIGGER resources_outbox_delete
    AFTER DELETE ON {{schema}}.resources
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{schema}}.syncer_outbox_append();

-- An insert that brings a deleted id back continues above the tombstone,
-- and the tombstone goes: the new version supersedes it, as a newer version
-- supersedes an older one that was never sent. A statement trigger with a
-- transition table, not a row trigger: it runs after the insert's unique
-- check, so it sees the tombstone of a delete that committed while the
-- insert waited for it, and it costs a single-row insert one trigger call
-- and one probe of the tombstones' primary key.
CREATE FUNCTION {{schema}}.syncer_resources_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted_rows n JOIN {{schema}}.syncer_tombstones t ON t.id = n.id) THEN
        WITH gone AS (
            DELETE FROM {{schema}}.syncer_tombstones t USING inserted_rows n
            WHERE t.id = n.id
            RETURNING t.id, t.version
        )
        UPDATE {{schema}}.resources r SET version = r.version + gone.version
        FROM gone WHERE r.id = gone.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER resources_reinsert
    AFTER INSERT ON {{schema}}.resources
    REFERENCING NEW TABLE AS inserted_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{schema}}.syncer_resources_inserted();

-- TRUNCATE deletes without running delete triggers, so it would leave the
-- third party every row: refused, with what to do instead. An operator who
-- means it (a test database, a reset agreed with the third party) says so
-- in the transaction.
CREATE FUNCTION {{schema}}.syncer_resources_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('syncer.allow_truncate', true), '') <> 'on' THEN
        RAISE EXCEPTION 'syncer: TRUNCATE of % would delete rows without telling the third party', TG_TABLE_NAME
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Use DELETE FROM ' || TG_TABLE_NAME || ' so each row becomes a tombstone that syncer exports. '
                      || 'To empty the table without telling the third party, run SET LOCAL syncer.allow_truncate = on in the same transaction first.';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER resources_truncate
    BEFORE TRUNCATE ON {{schema}}.resources
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{schema}}.syncer_resources_truncate();
