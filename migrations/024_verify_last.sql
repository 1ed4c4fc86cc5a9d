-- The last verify of each source (issue 44; docs/protocol.md, "Verify and
-- heal"): what `status`, the console and the metrics show of it, and the
-- console's "Verify now" request the daemons pick up. One row per source,
-- kept after the run (syncer_verify_runs holds a run's cursor only while it
-- is under way). internal/verify owns every statement on it.
--   state:        running, finished, failed or interrupted (stopped by a
--                 shutdown or a signal; the next run resumes it).
--   counts:       the last finished run's counts by kind, kept while the
--                 next one runs.
--   requested_at: set by "Verify now"; a daemon starts a run when it is
--                 after the last run's start.
CREATE TABLE IF NOT EXISTS {{schema}}.syncer_verify_last (
    source       text        PRIMARY KEY,
    state        text        NOT NULL DEFAULT 'requested',
    started_at   timestamptz,
    finished_at  timestamptz,
    counts       jsonb,
    error        text        NOT NULL DEFAULT '',
    by_whom      text        NOT NULL DEFAULT '',
    requested_at timestamptz
);
