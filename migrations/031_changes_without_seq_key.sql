-- The change log without its primary key on seq (issue 57): every change
-- a writer captures paid a B-tree insert into syncer_changes_pkey and its
-- WAL (about 72 bytes of the trigger's 290 a row), and the marks' delete
-- paid its removal, for an index only a few statements read. They now
-- find the changes through syncer_changes_key_idx (source, num, key, seq)
-- or the lane index, which hold seq too, and delete them by ctid.
--
-- seq stays what 007 made it: an identity without a cache, so unique and,
-- for one key, in the order of its commits. Nothing references the key.
ALTER TABLE {{schema}}.syncer_changes DROP CONSTRAINT IF EXISTS syncer_changes_pkey;
