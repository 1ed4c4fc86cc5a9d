-- A key's failure is its tenant's (issue 43, contract section 10): a key
-- that moved between tenants, or the same key value at two tenants, fails
-- and is retried at each tenant apart. The key of syncer_source_failures
-- becomes (source, tenant, key) for tenant sources.
--
-- The rows of sources without a tenant column keep tenant NULL, as their
-- changes do (syncer_changes.tenant, migration 022): every reader that
-- tells them apart by NULL keeps working, and a retry's re-logged change
-- keeps NULL. A primary key cannot hold NULL, and a plain unique index
-- would let NULL rows repeat, so two partial unique indexes share the
-- table: (source, key) among the untenanted rows, (source, tenant, key)
-- among the tenanted ones; an ON CONFLICT names its own (with its WHERE).
-- NULLS NOT DISTINCT would do it in one, but needs PostgreSQL 15.
ALTER TABLE {{schema}}.syncer_source_failures DROP CONSTRAINT IF EXISTS syncer_source_failures_pkey;
CREATE UNIQUE INDEX IF NOT EXISTS syncer_source_failures_key_idx
    ON {{schema}}.syncer_source_failures (source, key) WHERE tenant IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS syncer_source_failures_tenant_key_idx
    ON {{schema}}.syncer_source_failures (source, tenant, key) WHERE tenant IS NOT NULL;

-- A held key is its tenant's too (internal/holds): a tenant's transient
-- answer to a key holds that tenant's key, not the same key of another
-- tenant of the lane, and one tenant's answer never releases another's
-- hold. Outside a lane the tenant is '' (a primary key holds no NULL; a
-- feed is a lane's, all of whose holds have a tenant, or not a lane's, so
-- '' never meets a tenant's '' in one feed).
ALTER TABLE {{schema}}.syncer_held_keys
    ADD COLUMN IF NOT EXISTS tenant text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.syncer_held_keys DROP CONSTRAINT IF EXISTS syncer_held_keys_pkey;
ALTER TABLE {{schema}}.syncer_held_keys ADD PRIMARY KEY (feed, tenant, key);

-- A digest of an accepted body is its tenant's too (internal/unchanged):
-- each tenant is its own account, so a row moved to another tenant is
-- never skipped there for a body the old tenant's account holds. Outside
-- tenants the tenant is '', as for held keys.
ALTER TABLE {{schema}}.syncer_accepted_bodies
    ADD COLUMN IF NOT EXISTS tenant text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.syncer_accepted_bodies DROP CONSTRAINT IF EXISTS syncer_accepted_bodies_pkey;
ALTER TABLE {{schema}}.syncer_accepted_bodies ADD PRIMARY KEY (feed, tenant, key);

-- The digests' writer of migration 026, for the new key: a tenant's
-- digests are inserted under it ('' outside tenants).
DROP FUNCTION IF EXISTS {{schema}}.syncer_keep_digests(text, text[], bytea[]);
CREATE OR REPLACE FUNCTION {{schema}}.syncer_keep_digests(p_feed text, p_tenant text, p_keys text[], p_digests bytea[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        INSERT INTO {{schema}}.syncer_accepted_bodies (feed, tenant, key, digest)
        SELECT p_feed, p_tenant, n.key, n.digest FROM unnest(p_keys, p_digests) AS n (key, digest);
    EXCEPTION WHEN unique_violation THEN
        INSERT INTO {{schema}}.syncer_accepted_bodies AS b (feed, tenant, key, digest)
        SELECT p_feed, p_tenant, n.key, n.digest FROM unnest(p_keys, p_digests) AS n (key, digest)
        ON CONFLICT (feed, tenant, key) DO UPDATE SET digest = EXCLUDED.digest;
    END;
END
$$;
