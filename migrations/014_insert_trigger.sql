-- An insert into resources ran two statement triggers: one appended the
-- outbox event (syncer_outbox_append), one brought a deleted id back above
-- its tombstone (syncer_resources_inserted). Each call of a trigger
-- function costs the writer its own start, and measured with single-row
-- inserts (docs/design.md, "What the triggers cost the writers") the
-- second call was a quarter of what the triggers added to an insert. One
-- function now does both, in the order they ran; updates and deletes keep
-- theirs. The event is the same ('INSERT'), so relays of every version
-- read it alike.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_resources_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF {{gate_open}} THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES ('INSERT');
        PERFORM pg_notify({{channel}}, '');
    END IF;
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

DROP TRIGGER resources_outbox_insert ON {{schema}}.resources;
