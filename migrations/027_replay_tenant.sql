-- A replay of one tenant's rows (issue 43; docs/protocol.md section 10,
-- "Seen and acted on": replay --source S --tenant T): the tenant, in its
-- text form, bounds the rows the replay logs; NULL is every tenant.
ALTER TABLE {{schema}}.syncer_replays
    ADD COLUMN IF NOT EXISTS tenant text COLLATE "C";
