-- A source's key may be several columns, its table's composite primary
-- key (section 7 of the contract). key_columns and key_kinds list the
-- columns and their kinds in the order the configuration does; for such a
-- key, key_column holds the compact JSON array of their names and key_kind
-- is 'composite'. A key of one column leaves them NULL, as before.
ALTER TABLE {{schema}}.syncer_sources
    ADD COLUMN key_columns text[],
    ADD COLUMN key_kinds text[],
    DROP CONSTRAINT syncer_sources_key_kind_check,
    ADD CONSTRAINT syncer_sources_key_kind_check CHECK (key_kind IN ('integer', 'text', 'uuid', 'composite'));
