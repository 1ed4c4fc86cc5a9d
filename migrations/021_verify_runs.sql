-- The progress of a `syncer verify` run (issue 44; docs/protocol.md,
-- "Verify and heal"): one row per source while a run is under way, so a
-- run interrupted (SIGINT, a crash) goes on after the last key it checked
-- rather than from the start, with the counts and examples it had. The row
-- is deleted when the run finishes. internal/verify owns every statement on
-- it. The range and the sample are kept so a run with other bounds starts
-- afresh instead of resuming a run that checked something else.
CREATE TABLE IF NOT EXISTS {{schema}}.syncer_verify_runs (
    source     text        PRIMARY KEY,
    from_key   text        NOT NULL DEFAULT '',
    to_key     text        NOT NULL DEFAULT '',
    sample     double precision NOT NULL DEFAULT 1,
    after_key  text,
    counts     jsonb       NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
