-- One outbox event and notification a transaction for resources, not one
-- a statement (issue 57), as a configured source's capture makes since
-- captureVersion v6: a transaction of many statements appended as many
-- events, each an index entry and its WAL, and as many pg_notify calls,
-- which PostgreSQL then folded into one at commit.
--
-- The flag ({{signalled}}) is local to the transaction and to the
-- schema, undone with a rolled-back savepoint as the event is, and read
-- after the gate: a statement while the gate is shut (the daemon busy)
-- pays what it did. The bodies are 016's and 018's otherwise, and name
-- everything with its schema as theirs do.
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
            RETURNING t.id, t.version
        )
        UPDATE {{schema}}.resources r SET version = r.version OPERATOR(pg_catalog.+) gone.version
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
    IF syncer_open AND NOT COALESCE(pg_catalog.current_setting({{signalled}}, true) OPERATOR(pg_catalog.=) 'on', false) THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES ('DELETE');
        PERFORM pg_catalog.pg_notify({{channel}}, '');
        PERFORM pg_catalog.set_config({{signalled}}, 'on', true);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.syncer_outbox_append() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NOT COALESCE(pg_catalog.current_setting({{payload_changed}}, true) OPERATOR(pg_catalog.=) 'on', false) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_catalog.set_config({{payload_changed}}, '', true);
    IF {{gate_open}} AND NOT COALESCE(pg_catalog.current_setting({{signalled}}, true) OPERATOR(pg_catalog.=) 'on', false) THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES (TG_OP);
        PERFORM pg_catalog.pg_notify({{channel}}, '');
        PERFORM pg_catalog.set_config({{signalled}}, 'on', true);
    END IF;
    RETURN NULL;
END
$$;
