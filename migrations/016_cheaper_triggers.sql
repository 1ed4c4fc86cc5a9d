-- Cheaper triggers on resources (issue 32; docs/design.md, "What the
-- triggers cost the writers"). What they write is what they wrote: the
-- same tombstones, outbox events and notifications, through the same gate.
--
-- No SET search_path. A function's SET makes every call save the setting,
-- set it, and restore it on return, and the changed path makes the
-- function's cached plans and then the writer's own re-check theirs: per
-- statement that was more than any query the functions run. Pinning the
-- path kept a writer's objects from standing in for what the bodies name
-- (they run as syncer's owner, migration 009); naming everything
-- explicitly keeps that without the pin: every table with its schema,
-- every function and operator with pg_catalog (OPERATOR(pg_catalog.>)),
-- no type name but SQL's keywords (boolean), and the transition tables,
-- which PostgreSQL resolves before any schema. The gate ({{gate_open}})
-- is written the same way (migrations.GateOpen).
--
-- An insert reads the gate and looks for tombstones of its ids in one
-- query rather than two: each query a trigger runs costs the writer its
-- executor's start and end, whatever it reads. The reinsert check still
-- runs after the insert's unique check, in a snapshot taken then.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_resources_inserted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    syncer_open boolean;
    syncer_back boolean;
BEGIN
    SELECT {{gate_open}},
           EXISTS (SELECT FROM inserted_rows n JOIN {{schema}}.syncer_tombstones t ON t.id OPERATOR(pg_catalog.=) n.id)
      INTO syncer_open, syncer_back;
    IF syncer_open THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES ('INSERT');
        PERFORM pg_catalog.pg_notify({{channel}}, '');
    END IF;
    IF syncer_back THEN
        WITH gone AS (
            DELETE FROM {{schema}}.syncer_tombstones t USING inserted_rows n
            WHERE t.id OPERATOR(pg_catalog.=) n.id
            RETURNING t.id, t.version
        )
        UPDATE {{schema}}.resources r SET version = r.version OPERATOR(pg_catalog.+) gone.version
        FROM gone WHERE r.id OPERATOR(pg_catalog.=) gone.id;
    END IF;
    RETURN NULL;
END
$$;

-- A delete writes its tombstones and reads the gate in one statement: the
-- upsert is a data-modifying WITH, which runs to its end whether or not
-- the query reads it. The tombstones are still written before the event.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_resources_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    syncer_open boolean;
BEGIN
    WITH tombstones AS (
        INSERT INTO {{schema}}.syncer_tombstones AS t (id, version, created_at)
        SELECT id, version OPERATOR(pg_catalog.+) 1, created_at FROM deleted_rows
        ON CONFLICT (id) DO UPDATE
            SET version    = greatest(t.version OPERATOR(pg_catalog.+) 1, EXCLUDED.version),
                created_at = EXCLUDED.created_at,
                deleted_at = pg_catalog.now(),
                synced_at  = NULL,
                failed_at  = NULL,
                sync_error = NULL
    )
    SELECT {{gate_open}} INTO syncer_open;
    IF syncer_open THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES ('DELETE');
        PERFORM pg_catalog.pg_notify({{channel}}, '');
    END IF;
    RETURN NULL;
END
$$;

-- Updates of payload: the same body as migration 006's, named as above.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_outbox_append() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF {{gate_open}} THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES (TG_OP);
        PERFORM pg_catalog.pg_notify({{channel}}, '');
    END IF;
    RETURN NULL;
END
$$;
