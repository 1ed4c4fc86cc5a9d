-- An UPDATE of resources that leaves every payload as it was appends no
-- outbox event and sends no notification (issue 45). Its rows never had a
-- new version (resources_new_version runs only WHEN the payload is
-- distinct), but the statement trigger on UPDATE OF payload appended an
-- event and woke a daemon that then found nothing to send.
--
-- The row trigger, which runs only for a row whose payload changed, sets a
-- transaction-local flag; the statement trigger appends an event only when
-- the flag is set, and clears it, so a later statement of the same
-- transaction that changes nothing appends nothing either. A rolled-back
-- savepoint undoes the flag with the rows. Transition tables would say the
-- same, but capturing them costs every writer on every row (migration
-- 002). Both bodies name everything with its schema, as migration 016's.
CREATE OR REPLACE FUNCTION {{schema}}.syncer_resources_new_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.version    := OLD.version OPERATOR(pg_catalog.+) 1;
    NEW.changed_at := pg_catalog.now();
    NEW.synced_at  := NULL;
    NEW.failed_at  := NULL;
    NEW.sync_error := NULL;
    PERFORM pg_catalog.set_config({{payload_changed}}, 'on', true);
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.syncer_outbox_append() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NOT COALESCE(pg_catalog.current_setting({{payload_changed}}, true) OPERATOR(pg_catalog.=) 'on', false) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_catalog.set_config({{payload_changed}}, '', true);
    IF {{gate_open}} THEN
        INSERT INTO {{schema}}.syncer_outbox (op) VALUES (TG_OP);
        PERFORM pg_catalog.pg_notify({{channel}}, '');
    END IF;
    RETURN NULL;
END
$$;
