-- The gate closes itself when no daemon is alive. See docs/design.md, "The
-- outbox and its gate", and internal/outbox.
--
-- armed says whether the exporter wants notifications (it shuts the gate
-- while it drains); lease_until says until when some daemon's relay is
-- alive to hear them. Each relay renews the lease while it listens. With no
-- relay alive the lease runs out: writers then pay only for reading this
-- row, and the outbox stops growing, where an armed gate with nobody
-- listening made every statement append an event and NOTIFY for nothing.
-- A daemon that starts looks at the table itself (the relay's kick), so
-- nothing written meanwhile waits.
ALTER TABLE {{schema}}.syncer_gate
    ADD COLUMN lease_until timestamptz NOT NULL DEFAULT '-infinity';

-- now() is the writer's transaction start: a lease that ran out while a
-- long transaction was open still counts for it, which errs towards a
-- notification.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_outbox_append() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF {{gate_open}} THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES (TG_OP);
        PERFORM pg_notify({{channel}}, '');
    END IF;
    RETURN NULL;
END
$$;
