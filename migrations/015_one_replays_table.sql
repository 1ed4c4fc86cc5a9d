-- One replays table (issue 34): a source replay's range and cursor move
-- from syncer_source_replays (migration 010) into its row of
-- syncer_replays, whose one owner is internal/replays. since and until are
-- the resources' replay columns, reused: for a source replay they bound
-- the source's changed_column; from_key and to_key bound the key,
-- inclusive, in its text form. after_key is the last key logged (the next
-- chunk starts after it), keys_logged counts the keys queued so far, and
-- last_seq is the highest change logged: the replay's keys are sent once
-- the source has no change up to it left. Columns added without a volatile
-- default are catalog changes only: the lock on syncer_replays is brief.
ALTER TABLE {{schema}}.syncer_replays
    ADD COLUMN from_key       text,
    ADD COLUMN to_key         text,
    ADD COLUMN changed_column text,
    ADD COLUMN after_key      text,
    ADD COLUMN keys_logged    bigint NOT NULL DEFAULT 0,
    ADD COLUMN last_seq       bigint NOT NULL DEFAULT 0;

-- Every source replay's range and cursor as they stand now. From this
-- release on syncer reads and writes these columns only.
UPDATE {{schema}}.syncer_replays r SET
    from_key = sr.from_key,
    to_key = sr.to_key,
    since = sr.since,
    until = sr.until,
    changed_column = sr.changed_column,
    after_key = sr.after_key,
    keys_logged = sr.keys_logged,
    last_seq = sr.last_seq
FROM {{schema}}.syncer_source_replays sr
WHERE r.id = sr.replay_id;

-- syncer_source_replays stays, unused by this release: in a rolling
-- upgrade daemons of the previous release run while (and after) this
-- migration does, and they read and write it. A daemon of the previous
-- release that goes on logging a source replay advances the cursor there
-- only; this release's daemons start that replay again from the cursor
-- copied above, so some keys are logged twice (docs/sources.md, "Upgrading
-- across migration 015"). A later release drops the table, and with it
-- the trigger below.
--
-- A source replay created meanwhile by the previous release's CLI writes
-- its range into syncer_source_replays, after its row of syncer_replays:
-- the trigger copies that range here, in the CLI's transaction, so this
-- release's daemons replay the range asked for rather than the whole table.
CREATE FUNCTION {{schema}}.syncer_source_replays_copied() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE {{schema}}.syncer_replays SET
        from_key = NEW.from_key,
        to_key = NEW.to_key,
        since = NEW.since,
        until = NEW.until,
        changed_column = NEW.changed_column
    WHERE id = NEW.replay_id;
    RETURN NULL;
END
$$;

-- Named as the migrations name the resources' triggers: syncer_* names a
-- source's capture trigger, which tests look for.
CREATE TRIGGER source_replays_copied AFTER INSERT ON {{schema}}.syncer_source_replays
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.syncer_source_replays_copied();
