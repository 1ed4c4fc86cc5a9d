-- A source's row filter (`where:`, section 7 of the contract), as the
-- configuration wrote it when migrate installed the triggers that
-- evaluate it; NULL exports every row.
ALTER TABLE {{schema}}.syncer_sources ADD COLUMN row_filter text;
