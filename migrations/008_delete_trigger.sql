-- One trigger call a DELETE statement rather than two: the tombstones'
-- statement trigger also goes through the outbox's gate, as
-- syncer_outbox_append does for inserts and updates. A single-row delete
-- paid for two plpgsql trigger calls, which writers with syncer's triggers
-- felt (issue 10's delete overhead). The tombstone is written before the
-- event, in the deleting transaction as before: a rolled-back delete leaves
-- neither.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_resources_deleted() RETURNS trigger
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
    IF {{gate_open}} THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES ('DELETE');
        PERFORM pg_notify({{channel}}, '');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER resources_outbox_delete ON {{schema}}.resources;
