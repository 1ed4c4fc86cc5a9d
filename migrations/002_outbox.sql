-- The transactional outbox. See docs/design.md, "The outbox and its gate".
--
-- An event is appended by a statement-level trigger in the writer's own
-- transaction, so a rolled-back insert leaves no event, and a statement that
-- writes many rows appends one event, not one per row. The event says only
-- that something changed: which rows to export is always read from
-- resources, so no event can disagree with the data.
CREATE TABLE {{schema}}.syncer_outbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    op         text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- No transition tables: capturing them costs every writer on every row,
-- even while the gate is shut, and a statement that touched no row only
-- causes one spare wake-up.

-- The gate. NOTIFY serialises every committing transaction that sent one
-- (PostgreSQL takes a global lock at commit), so writers only append an event
-- and notify while the daemon is armed, that is waiting for a wake-up. While
-- the daemon is draining it is disarmed and finds new rows by looking at the
-- resources table itself, which is the source of truth anyway.
CREATE TABLE {{schema}}.syncer_gate (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    armed     boolean     NOT NULL DEFAULT true,
    armed_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {{schema}}.syncer_gate DEFAULT VALUES;

CREATE FUNCTION {{schema}}.syncer_outbox_append() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT armed FROM {{schema}}.syncer_gate) THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES (TG_OP);
        PERFORM pg_notify({{channel}}, '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER resources_outbox_insert
    AFTER INSERT ON {{schema}}.resources
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{schema}}.syncer_outbox_append();

-- OF payload: syncer's own marks (synced_at, failed_at) append nothing.
CREATE TRIGGER resources_outbox_update
    AFTER UPDATE OF payload ON {{schema}}.resources
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{schema}}.syncer_outbox_append();
