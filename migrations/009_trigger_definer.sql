-- The triggers of resources run as syncer's owner, as the sources' capture
-- functions do (internal/sources): the application's writer needs
-- privileges on resources (and its sequence) only, none on syncer_gate,
-- syncer_outbox or syncer_tombstones, which these functions write. Issue
-- 24: a writer with SELECT, INSERT, UPDATE, DELETE on resources could not
-- insert (permission denied for table syncer_gate) nor delete
-- (syncer_tombstones). search_path is pinned, so a writer's own objects
-- cannot stand in for anything the bodies name: every table is named with
-- its schema, the rest is pg_catalog's. See docs/operations.md, "Roles and
-- privileges".
--
-- syncer_resources_new_version (it only sets NEW's columns) and
-- syncer_resources_truncate (it only raises) touch no table and stay as
-- they are.
ALTER FUNCTION {{schema}}.syncer_outbox_append() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.syncer_resources_deleted() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.syncer_resources_inserted() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- A trigger function cannot be called but as a trigger; still, nobody but
-- the owner needs to name these.
REVOKE EXECUTE ON FUNCTION {{schema}}.syncer_outbox_append() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.syncer_resources_deleted() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.syncer_resources_inserted() FROM PUBLIC;
