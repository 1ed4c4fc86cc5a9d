package sources

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/replays"
)

// IsInstalled reports whether source name is installed (migrate ran with it
// in the configuration).
func IsInstalled(ctx context.Context, q database.Querier, name string) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM syncer_sources WHERE name = $1)`, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("sources: source %s: installed: %w", name, err)
	}
	return ok, nil
}

// CountInstalled counts the installed sources.
func CountInstalled(ctx context.Context, q database.Querier) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM syncer_sources`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sources: count installed: %w", err)
	}
	return n, nil
}

// WithWork returns those of names with work to export: pending changes,
// a snapshot not done, a replay (replay --source) not done, or a capture
// broken (a partition without triggers). The relay's poll asks it, so that work whose
// event the shut gate or a lost notification kept away is still found.
func WithWork(ctx context.Context, q database.Querier, names []string) ([]string, error) {
	replaying, err := replays.SourcesWaiting(ctx, q, names)
	if err != nil {
		return nil, fmt.Errorf("sources: with work: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT s.name FROM syncer_sources s WHERE s.name = ANY($1)
		AND (s.snapshot_state IN ('pending', 'running') OR EXISTS (SELECT 1 FROM syncer_changes c WHERE c.source = s.name)
			OR s.name = ANY($2) OR `+CaptureBrokenSQL+`)`, names, replaying)
	if err != nil {
		return nil, fmt.Errorf("sources: with work: %w", err)
	}
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sources: with work: %w", err)
	}
	return names, nil
}

// Definitions returns every installed source's definition as migrate
// recorded it (table, key, columns, destination, row filter), one opaque
// digest per source name. A daemon compares two readings to learn that
// migrate installed, changed or removed a source while it ran; the
// snapshot's progress, which the daemons write, is not part of it.
func Definitions(ctx context.Context, q database.Querier) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT name, md5(concat_ws(E'\x1f', schema_name, table_name, key_column, key_kind,
			key_type, columns::text, key_columns::text, destination, row_filter, installed_at::text, tenant_column, lanes::text)) FROM syncer_sources`)
	if err != nil {
		return nil, fmt.Errorf("sources: definitions: %w", err)
	}
	out := map[string]string{}
	var name, digest string
	if _, err := pgx.ForEachRow(rows, []any{&name, &digest}, func() error {
		out[name] = digest
		return nil
	}); err != nil {
		return nil, fmt.Errorf("sources: definitions: %w", err)
	}
	return out, nil
}
